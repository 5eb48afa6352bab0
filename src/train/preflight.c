/* preflight.c — checks a run makes before it trains, and the periodic replica check.
 *
 * Agreement (MPI): every process of an MPI job reads its own command line, config file and data,
 * so nothing but this check stops rank 1 from training with another seed, learning rate or data
 * file than rank 0 (stage 0 would run to the end with every replica different). The ranks
 * all-gather one hash per configuration key (the effective values, after the batch sizes are
 * resolved) plus one of the data (token count and content), compare every rank with rank 0, and
 * all fail with the first differing key and both values.
 *
 * Not here: the thread ranks of one process, which share one configuration and one copy of the
 * data. Invariant: every rank walks the same key table in the same order, so the hash vectors
 * line up; keys that may differ per rank without changing the math are left out (below).
 */
#include "train/preflight.h"

#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

/* Keys a rank may set differently from rank 0 without training a different model: the data
 * path (the data's content is compared instead), compute threads (a machine's cores; results do
 * not depend on them), the backend spelling (auto and mpi both mean MPI here), how often rank 0
 * prints, the local memory check, and how long a collective waits (ZERO_TIMEOUT may be set on
 * some machines only). */
static const char *const per_rank_keys[] = {"data.path",          "train.threads",
                                            "train.backend",      "steps_per_print",
                                            "train.memory_check", "train.timeout_s"};

static int is_per_rank(const char *name) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(per_rank_keys); i++)
        if (!strcmp(name, per_rank_keys[i])) return 1;
    return 0;
}

#define SEED_HASH 0xcbf29ce484222325ull
#define VALUE_MAX 256

/* Value i of this rank as text: a configuration key, or (i == count) the data's identity. */
static void value_of(const zero_train_config_t *cfg, const zero_dataset_t *data, int i, int count,
                     int display, char *buf, size_t n) {
    if (i < count) {
        zero__train_config_value_str(cfg, i, buf, n);
        return;
    }
    uint64_t h = data->content_hash;
    /* The file name only in messages: the same data may live at another path on another
     * machine. */
    snprintf(buf, n, "%zu tokens with content hash %016llx%s%.160s%s", data->count,
             (unsigned long long)h, display ? " (" : "", display ? data->source : "",
             display ? ")" : "");
}

zero_status_t zero__train_agree(const zero_train_config_t *cfg, const zero_dataset_t *data,
                                zero_comm_t *comm) {
    const int world = comm ? zero_comm_size(comm) : 1;
    if (world == 1) return ZERO_OK;
    const int keys = zero__train_config_key_count(), n = keys + 1;
    uint64_t *mine = calloc((size_t)n, sizeof *mine);
    uint64_t *all = calloc((size_t)n * (size_t)world, sizeof *all);
    if (!mine || !all) {
        free(mine);
        free(all);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "cannot compare the configuration of %d ranks: out of memory", world);
    }
    char buf[VALUE_MAX];
    for (int i = 0; i < n; i++) {
        if (i < keys && is_per_rank(zero__train_config_key_name(i))) continue;
        value_of(cfg, data, i, keys, 0, buf, sizeof buf);
        mine[i] = zero__hash_bytes(SEED_HASH, buf, strlen(buf)) | 1;
    }
    zero_status_t st =
        zero_comm_all_gather(mine, all, (size_t)n * sizeof *mine, ZERO_DTYPE_UINT8, comm);
    free(mine);
    if (st) {
        free(all);
        return st;
    }
    /* Every rank reads the same table: the same verdict everywhere, and the same two ranks then
     * broadcast their value of the first differing key. */
    int key = -1, rank = -1, ranks_off = 0;
    for (int i = 0; i < n && key < 0; i++)
        for (int r = 1; r < world && key < 0; r++)
            if (all[(size_t)r * n + i] != all[i]) key = i, rank = r;
    for (int r = 1; key >= 0 && r < world; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * n + i] != all[i]) {
                ranks_off++;
                break;
            }
    free(all);
    if (key < 0) return ZERO_OK;
    char v0[VALUE_MAX], vr[VALUE_MAX];
    value_of(cfg, data, key, keys, 1, buf, sizeof buf);
    st = zero_comm_broadcast(buf, v0, sizeof buf, ZERO_DTYPE_UINT8, 0, comm);
    if (!st) st = zero_comm_broadcast(buf, vr, sizeof buf, ZERO_DTYPE_UINT8, rank, comm);
    if (st) return st;
    v0[sizeof v0 - 1] = vr[sizeof vr - 1] = 0;
    const char *name = key < keys ? zero__train_config_key_name(key) : "data";
    return zero__error(ZERO_ERR_CONFIG,
                       "the ranks of this MPI job do not train the same model: rank %d has %s = "
                       "%s, rank 0 has %s = %s (expected the same configuration, seed and data on "
                       "every rank; %d of %d ranks differ from rank 0)",
                       rank, name, vr, name, v0, ranks_off, world);
}

zero_status_t zero__train_replica_check(const zero_train_config_t *cfg, zero_engine_t *eng,
                                        int64_t step, int last) {
    const int every = cfg->replica_check_every;
    if (every <= 0 || !(step % every == 0 || last)) return ZERO_OK;
    return zero_engine_check_replicas(eng);
}
