/* zero/ckpt.h — sharded, crash-safe checkpoints; resharding; safetensors export and import.
 *
 * A checkpoint is a directory `step-00000123/` holding `manifest.json` (step, world size, stage,
 * the unit layout and the caller's opaque JSON: model config, training config, data position,
 * RNG states, learning-rate schedule, loss scaler), per-rank shard files `rank-00000.params`
 * (fp32 master) and `rank-00000.optim` (Adam m then v), each with a header (magic, version, sizes)
 * and a CRC32C per 4 MiB chunk, and a `COMPLETE` marker written last. The format is specified in
 * docs/checkpoint-format.md.
 *
 * The module does not know the engine: it sees a layout (units of named tensors) and reaches the
 * state through a shard-access callback (zero_ckpt_shard_io_t). Each unit is one flat buffer of
 * param_count elements (up to the end of its last tensor) padded to a multiple of world * 16;
 * rank r owns [r*S, (r+1)*S) with S = padded / world (docs/ARCHITECTURE.md section 3). Because
 * shards are plain ranges, loading at another world size is a re-slicing.
 *
 * Ownership: strings and layouts passed in are borrowed for the duration of the call; those
 * returned by an opened checkpoint are owned by it (valid until zero_ckpt_close).
 * Threading: a zero_ckpt_t is used by one thread at a time; functions taking a communicator are
 * collective over it (every rank calls them with the same arguments).
 */
#ifndef ZERO_CKPT_H
#define ZERO_CKPT_H

#include "zero/comm.h"
#include "zero/core.h"
#include "zero/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZERO_CKPT_FORMAT_VERSION 1
#define ZERO_CKPT_MAX_DIMS 4
/* Shards are aligned to this many elements per rank (64 bytes of fp32). */
#define ZERO_CKPT_ALIGN_ELEMS 16

/* The three fp32 states of a unit, as stored: params in `.params`, m and v in `.optim`. */
typedef enum {
    ZERO_CKPT_PARAMS,
    ZERO_CKPT_ADAM_M,
    ZERO_CKPT_ADAM_V,
    ZERO_CKPT_STATE_COUNT
} zero_ckpt_state_t;

ZERO_API const char *zero_ckpt_state_name(zero_ckpt_state_t state); /* "params", "adam_m", ... */

/* ------------------------------------------------------------------------------ layout */

typedef struct zero_ckpt_tensor {
    const char *name;
    int ndim; /* 1 .. ZERO_CKPT_MAX_DIMS */
    size_t shape[ZERO_CKPT_MAX_DIMS];
    size_t offset;  /* element offset inside the unit buffer */
    unsigned flags; /* zero_tensor_flag_t bits (opaque here) */
} zero_ckpt_tensor_t;

typedef struct zero_ckpt_unit {
    const char *name;
    size_t param_count; /* elements without padding; tensors lie inside [0, param_count).
                           The extent, not always the sum of the tensors: an engine unit
                           (zero_ckpt_engine_layout_init) starts each tensor at a multiple of
                           16 elements, so its gaps of zeros count too. */
    int tensor_count;
    const zero_ckpt_tensor_t *tensors;
    /* 0 or 1: a plain unit. > 1: the saving engine held it stacked (zero_engine_add_unit_in), as
     * `copies` slices along dimension 0 of each tensor; the shapes here and the files are the
     * logical tensors whatever the copies, so this is for messages only (manifest key "copies",
     * absent for plain units). */
    int copies;
} zero_ckpt_unit_t;

typedef struct zero_ckpt_layout {
    int unit_count;
    const zero_ckpt_unit_t *units;
} zero_ckpt_layout_t;

/* Padded size of a unit at a world size (a multiple of world * 16) and rank r's shard of it. */
ZERO_API size_t zero_ckpt_padded_count(size_t param_count, int world);
ZERO_API void zero_ckpt_shard_range(size_t param_count, int world, int rank, size_t *offset,
                                    size_t *count);

/* Check that a layout is well formed (names, shapes inside param_count, no overlaps needed).
 * ZERO_ERR_INVALID_ARG naming the unit/tensor otherwise. */
ZERO_API zero_status_t zero_ckpt_layout_check(const zero_ckpt_layout_t *layout);

/* ------------------------------------------------------------------------------ state access */

/* How the checkpoint reaches the training state. Offsets are elements of the padded unit buffer
 * and always lie inside `rank`'s shard [r*S, (r+1)*S) at the world size of the call.
 * get (save): copy `count` elements of `state` of unit `unit` starting at `offset` into out.
 * put (load): store them. On load the padding beyond param_count is delivered as zeros.
 * Either may be NULL when not used by the call. Return ZERO_OK or an error (which aborts the
 * operation and is passed on). Called from the thread that called save/load. */
typedef struct zero_ckpt_shard_io {
    zero_status_t (*get)(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, float *out);
    zero_status_t (*put)(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                         size_t count, const float *in);
    void *user;
} zero_ckpt_shard_io_t;

/* What the trainer stores beside the tensors. Each *_json is a JSON text (any value) or NULL for
 * null; the checkpoint keeps it verbatim (re-serialised) and gives it back on load. run_id names
 * the training run that saved it (a run and its resumed continuations share one; 0: none, as in
 * checkpoints saved before it existed): keep_last deletes only checkpoints of the saver's run_id.
 */
typedef struct zero_ckpt_meta {
    int64_t step;
    int stage;
    const char *model_json;
    const char *training_json;
    const char *data_json;
    const char *rng_json;
    const char *lr_schedule_json;
    const char *loss_scaler_json;
    uint64_t run_id;
} zero_ckpt_meta_t;

/* ------------------------------------------------------------------------------ saving */

typedef struct zero_ckpt_save_params {
    const char *save_dir; /* parent directory (created if missing) */
    int world;            /* world size of the shards; 0: the comm's size (1 without comm);
                             with comm a non-zero value must equal the comm's size */
    int with_optim;       /* 1: also write Adam m, v (`.optim` files) */
    int keep_last;        /* > 0: after the new checkpoint is complete delete all but the newest
                             keep_last saves of the same run (meta->run_id) in save_dir, newest
                             by save time, not by step; other runs' checkpoints are never
                             deleted; 0 keeps all */
    zero_comm_t *comm;    /* borrowed; NULL: this caller writes every rank's files itself */
} zero_ckpt_save_params_t;

/* Defaults: world 0 (the comm's size, or 1), with_optim 1, keep_last 0, no comm. */
ZERO_API zero_ckpt_save_params_t zero_ckpt_save_params_default(void);

/* Write checkpoint `save_dir/step-<meta->step>/` atomically: shards and manifest go to a
 * temporary directory, every file and the directory are fsynced, `COMPLETE` is written last, the
 * directory is renamed and `save_dir/latest` replaced (write, fsync, rename). On failure nothing
 * visible changes (the temporary directory is removed when possible) and the previous
 * checkpoints stay intact. path_out (may be NULL) receives the checkpoint's path. Collective
 * over params->comm when given; every rank gets the same status. */
ZERO_API zero_status_t zero_ckpt_save(const zero_ckpt_save_params_t *params,
                                      const zero_ckpt_layout_t *layout,
                                      const zero_ckpt_meta_t *meta, const zero_ckpt_shard_io_t *io,
                                      char *path_out, size_t path_out_size);

/* Check, before training, what a later zero_ckpt_save with these arguments depends on: the
 * parameters, the layout, the manifest (built from layout and meta, then dropped) and that
 * params->save_dir is a writable directory (created if missing, as the save does; a probe file is
 * created and removed). Writes nothing else. Not collective: each caller checks for itself. */
ZERO_API zero_status_t zero_ckpt_save_check(const zero_ckpt_save_params_t *params,
                                            const zero_ckpt_layout_t *layout,
                                            const zero_ckpt_meta_t *meta);

/* The most recently saved complete checkpoint of save_dir (by the save time in its manifest;
 * the COMPLETE marker's modification time for checkpoints older than that field; ties: the
 * higher step), whatever `latest` says: for a save directory whose `latest` was lost. path_out
 * receives its path, or "" when save_dir holds none (or does not exist). Directories without a
 * valid COMPLETE marker and manifest are skipped. */
ZERO_API zero_status_t zero_ckpt_find_newest(const char *save_dir, char *path_out,
                                             size_t path_out_size);

/* ------------------------------------------------------------------------------ loading */

typedef struct zero_ckpt zero_ckpt_t;

/* Open a checkpoint: `path` is a checkpoint directory, a save directory (its `latest` is
 * followed) or `SAVE_DIR/latest`. Checks the completion marker and parses the manifest; shard
 * files are checked by zero_ckpt_verify / zero_ckpt_load. *out: zero_ckpt_close. */
ZERO_API zero_status_t zero_ckpt_open(zero_ckpt_t **out, const char *path);
ZERO_API void zero_ckpt_close(zero_ckpt_t *ckpt);

ZERO_API const char *zero_ckpt_path(const zero_ckpt_t *ckpt);
ZERO_API int zero_ckpt_world(const zero_ckpt_t *ckpt); /* world size it was saved at */
ZERO_API int zero_ckpt_has_optim(const zero_ckpt_t *ckpt);
/* Metadata (strings owned by ckpt; a JSON null comes back as "null"). */
ZERO_API const zero_ckpt_meta_t *zero_ckpt_get_meta(const zero_ckpt_t *ckpt);
ZERO_API const zero_ckpt_layout_t *zero_ckpt_get_layout(const zero_ckpt_t *ckpt);

/* Compare the saved layout with the model's: ZERO_ERR_MISMATCH naming the first unit or tensor
 * that differs (name, shape or offset), with what was expected and what was found. */
ZERO_API zero_status_t zero_ckpt_check_layout(const zero_ckpt_t *ckpt,
                                              const zero_ckpt_layout_t *expected);

/* Read every shard file completely and check headers, sizes and every chunk checksum. */
ZERO_API zero_status_t zero_ckpt_verify(const zero_ckpt_t *ckpt);

/* Read elements [offset, offset + count) of unit u's state (unpadded buffer, offset + count <=
 * param_count) from whichever rank files hold them, checking the checksums of every chunk
 * touched. Memory: one 4 MiB chunk buffer besides out. */
ZERO_API zero_status_t zero_ckpt_read_range(const zero_ckpt_t *ckpt, int unit,
                                            zero_ckpt_state_t state, size_t offset, size_t count,
                                            float *out);

typedef struct zero_ckpt_load_params {
    int world;         /* world size to load at (may differ from the saved one); 0: the comm's
                          size (1 without comm); with comm a non-zero value must equal it */
    int with_optim;    /* 1: also load Adam m, v (the checkpoint must have them) */
    zero_comm_t *comm; /* borrowed; NULL: the caller receives every rank's shards itself */
} zero_ckpt_load_params_t;

/* Defaults: world 0 (the comm's size, or 1), with_optim 1, no comm. */
ZERO_API zero_ckpt_load_params_t zero_ckpt_load_params_default(void);

/* Load the state into io->put, re-slicing when world differs from the saved one. First the
 * layout is checked against `expected` (may be NULL to skip) and every chunk of every file needed
 * is verified; only then is anything delivered, so a bad checkpoint loads nothing (a file that
 * changes between the two passes is still caught, but may leave a partial load). Collective over
 * params->comm when given (ranks agree on the verification before delivering); a rank whose
 * zero_ckpt_open failed calls it with ckpt NULL, so that every rank fails instead of waiting. */
ZERO_API zero_status_t zero_ckpt_load(const zero_ckpt_t *ckpt,
                                      const zero_ckpt_load_params_t *params,
                                      const zero_ckpt_layout_t *expected,
                                      const zero_ckpt_shard_io_t *io);

/* Parse a shard file or a manifest from memory (what the loaders use; exposed for the fuzz
 * target and tools). ZERO_ERR_FORMAT with a message on any inconsistency; never crashes. */
ZERO_API zero_status_t zero_ckpt_parse_shard_header(const void *data, size_t size);
ZERO_API zero_status_t zero_ckpt_parse_manifest(const char *text, size_t size);
/* The same for a safetensors file's first `size` bytes (8-byte header length, the JSON header,
 * then what there is of the data section, against whose end the offsets are checked): every
 * tensor's dtype, shape (whole numbers) and data_offsets inside the data, holding exactly shape
 * product x dtype size bytes, and no two tensors overlapping. What the import checks first. */
ZERO_API zero_status_t zero_ckpt_parse_safetensors_header(const void *data, size_t size);

/* ------------------------------------------------------------------------------ safetensors */

/* How a model names its tensors in a safetensors file. The model hands this map to the export
 * and the import, so the checkpoint code knows no model's names (GPT's map:
 * src/model/gpt.c; a model of one's own: examples/mlp.c).
 * name: write the file's name of tensor `tensor` of unit `unit` into out (out_size bytes,
 * NUL-terminated) and set *transposed to 1 when the file holds the 2-D tensor with its two
 * dimensions swapped (GPT-2's Conv1D weights: [in, out] for the engine's [out, in]), else 0.
 * Return 1 when the model has a name for the tensor, 0 when not: the export or import then fails
 * with ZERO_ERR_INVALID_ARG naming the tensor, its unit and `model`. Called from the calling
 * thread only. */
typedef struct zero_ckpt_name_map {
    const char *model; /* whose names these are, for messages ("Hugging Face GPT-2") */
    int (*name)(const void *user, const char *unit, const char *tensor, char *out, size_t out_size,
                int *transposed);
    const void *user;
} zero_ckpt_name_map_t;

/* Export the fp32 master weights to one safetensors file, each tensor under the name and in the
 * layout `names` gives (GPT: Hugging Face GPT-2 names, wte.weight, wpe.weight, h.N.ln_1.weight,
 * h.N.attn.c_attn.weight in Conv1D [in, out] layout, ..., ln_f.bias), in the checkpoint's unit
 * and tensor order. dtype: ZERO_DTYPE_FP32 or ZERO_DTYPE_BF16 (round to nearest even).
 * Streamed: memory is bounded by about one transposed tensor plus small buffers. Written to
 * `out_path.tmp` and renamed. A tensor without a name in the map fails naming it. */
ZERO_API zero_status_t zero_ckpt_export_safetensors(const zero_ckpt_t *ckpt,
                                                    const zero_ckpt_name_map_t *names,
                                                    const char *out_path, zero_dtype_t dtype);

/* Fill the parameters of `layout` from a safetensors file whose tensors are named and laid out as
 * `names` says (F32 or BF16). Checked first, in this order: the header
 * (zero_ckpt_parse_safetensors_header: a tensor whose data_offsets do not hold its shape, a shape
 * that is not whole numbers, or two tensors that overlap give ZERO_ERR_FORMAT naming them and what
 * was expected); every tensor of the layout by name and shape (ZERO_ERR_MISMATCH naming the first
 * tensor that is missing or has another shape: name, expected shape, found shape); every value
 * finite (ZERO_ERR_FORMAT naming the tensor, the first NaN or Inf element's index and its position
 * in the file's shape). Then the values are delivered through io->put(user, 0, unit,
 * ZERO_CKPT_PARAMS, offset, count, data) with offsets in the unit's unpadded buffer (a sharded
 * engine keeps the part it owns). Nothing is delivered when any check fails. */
ZERO_API zero_status_t zero_ckpt_import_safetensors(const char *path,
                                                    const zero_ckpt_layout_t *layout,
                                                    const zero_ckpt_name_map_t *names,
                                                    const zero_ckpt_shard_io_t *io);

/* ------------------------------------------------------------------------------ engine */

/* The engine's units and tensors as a checkpoint layout. Names are borrowed from the engine:
 * valid while it lives; free with zero_ckpt_engine_layout_free. */
typedef struct zero_ckpt_engine_layout {
    zero_ckpt_layout_t layout;
    zero_ckpt_unit_t *units;     /* owned */
    zero_ckpt_tensor_t *tensors; /* owned */
} zero_ckpt_engine_layout_t;

ZERO_API zero_status_t zero_ckpt_engine_layout_init(zero_ckpt_engine_layout_t *out,
                                                    const zero_engine_t *eng);
ZERO_API void zero_ckpt_engine_layout_free(zero_ckpt_engine_layout_t *layout);

/* Shard access on top of the engine's public API (zero_engine_state_read/write): fp32 master,
 * Adam m and v, with ranges clipped to the unit's extent (padding reads as zeros) and to what
 * this rank holds of each state (zero_engine_state_range), so a safetensors import or a
 * whole-unit load fills exactly that. Loading through a communicator at stage 3 delivers only
 * the rank's shard: load whole units at world 1 instead (what the trainer does). */
ZERO_API zero_ckpt_shard_io_t zero_ckpt_engine_io(zero_engine_t *eng);

/* Saving an engine with stacked units (zero_engine_add_unit_in): the checkpoint holds each as its
 * logical unit (tensors of shape (copies x shape[0], ...) placed by the engine's layout rule), so
 * it resumes at another world size or number of copies wherever the logical shapes allow. A rank's
 * shard of a logical unit spans copies other ranks hold: init gathers it beforehand, for every
 * stacked unit and state (params; and Adam m, v with with_optim), one unit and one state at a time
 * (zero_engine_state_gather: a transient copies x P_u fp32 elements, plus the world's shards of
 * the unit), and keeps this rank's shard of each (about what the rank holds of the unit's
 * states). zero_ckpt_engine_save_io then gives the shard access for zero_ckpt_save with the
 * engine's communicator (plain units go through zero_ckpt_engine_io's path); it is valid until
 * _free and while the engine's states are unchanged. Loading needs nothing more:
 * zero_ckpt_engine_io's put takes a logical range and keeps this rank's copy's slice, so load
 * stacked units whole, at world 1 without a communicator (as the trainer does).
 * zero_ckpt_engine_io's get refuses stacked units. Collective over the engine's world: a state a
 * rank cannot read fails every rank (zero_engine_state_gather); a rank out of memory for a
 * gather's buffers leaves the others waiting in it until the communicator's timeout. */
typedef struct zero_ckpt_engine_save zero_ckpt_engine_save_t;
ZERO_API zero_status_t zero_ckpt_engine_save_init(zero_ckpt_engine_save_t **out, zero_engine_t *eng,
                                                  int with_optim);
ZERO_API zero_ckpt_shard_io_t zero_ckpt_engine_save_io(zero_ckpt_engine_save_t *save);
ZERO_API void zero_ckpt_engine_save_free(zero_ckpt_engine_save_t *save); /* NULL accepted */

#ifdef __cplusplus
}
#endif
#endif /* ZERO_CKPT_H */
