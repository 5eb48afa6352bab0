/* convert.c — `zero convert CHECKPOINT OUT.safetensors|OUT_DIR/ [--dtype fp32|bf16]`: export a
 * checkpoint's fp32 master weights to one safetensors file with Hugging Face GPT-2 names and
 * layouts (the GPT model's name map, zero__gpt_names), and Hugging Face's config.json beside it,
 * so that GPT2LMHeadModel.from_pretrained(dir) loads a directory export as it is. MoE layers'
 * tensors keep zero's names under h.N.moe., the experts stacked (E, ...), not split per expert;
 * GPT-2's config cannot describe them, so an MoE export gets no config.json.
 *
 * CHECKPOINT is a checkpoint directory, a save directory (its `latest` is used) or DIR/latest.
 * The export streams (memory about one Conv1D weight plus small buffers) and verifies the
 * checksum of every chunk it reads; the optimizer state is not read.
 */
#include "cli/cli.h"
#include "core/core_internal.h"
#include "core/fileio.h"
#include "model/gpt.h"
#include "zero/zero.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: zero convert CHECKPOINT OUT.safetensors|OUT_DIR/ [--dtype fp32|bf16]\n\n"
            "  CHECKPOINT   a checkpoint directory (step-00000123), a save directory (its\n"
            "               `latest` is followed) or SAVE_DIR/latest\n"
            "  OUT          a .safetensors file, with Hugging Face's config.json written beside\n"
            "               it; or a directory (existing, or given with a trailing /) that gets\n"
            "               model.safetensors and config.json: GPT2LMHeadModel.from_pretrained\n"
            "               loads it as it is\n"
            "  --dtype      element type of the output: fp32 (default, exact) or bf16\n"
            "               (round to nearest even)\n\n"
            "Writes Hugging Face GPT-2 names and layouts (wte.weight, h.0.attn.c_attn.weight in\n"
            "Conv1D [in, out] layout, ..., ln_f.bias); an MoE layer's router and experts keep\n"
            "zero's names, h.N.moe.*, the experts stacked along dimension 0 (docs/moe.md).\n"
            "Check with tools/safetensors_check.py.\n");
}

/* Hugging Face's config.json for the checkpoint's GPT (GPT2Config's keys; zero's GPT is GPT-2's
 * architecture: pre-LayerNorm with eps 1e-5, GELU's tanh form, learned positions, the LM head tied
 * to the token embedding); into dir. An MoE model, or a checkpoint of another model, has none
 * (*written stays 0). */
static zero_status_t write_hf_config(const zero_ckpt_t *c, const char *dir, zero_dtype_t dtype,
                                     int *written) {
    *written = 0;
    cJSON *m = cJSON_Parse(zero_ckpt_get_meta(c)->model_json);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "gpt")) { /* another model's */
        cJSON_Delete(m);
        return ZERO_OK;
    }
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(m, "moe");
    const cJSON *experts = cJSON_GetObjectItemCaseSensitive(moe, "experts");
    const char *keys[] = {"layers", "heads", "dim", "vocab", "seq"};
    int v[5];
    for (int i = 0; i < 5; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, keys[i]);
        if (!cJSON_IsNumber(x)) {
            cJSON_Delete(m);
            return zero__error(ZERO_ERR_FORMAT,
                               "%s: the manifest's model has no \"%s\" (expected a GPT's shape)",
                               zero_ckpt_path(c), keys[i]);
        }
        v[i] = x->valueint;
    }
    const int is_moe = cJSON_IsNumber(experts) && experts->valueint > 0;
    cJSON_Delete(m);
    if (is_moe) return ZERO_OK;
    char text[1024];
    const int eos = v[3] >= 50257 ? 50256 : -1; /* GPT-2's <|endoftext|>, in its vocabulary */
    char eos_s[16] = "null";
    if (eos >= 0) snprintf(eos_s, sizeof eos_s, "%d", eos);
    snprintf(text, sizeof text,
             "{\n"
             "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
             "  \"model_type\": \"gpt2\",\n"
             "  \"vocab_size\": %d,\n"
             "  \"n_positions\": %d,\n"
             "  \"n_ctx\": %d,\n"
             "  \"n_embd\": %d,\n"
             "  \"n_layer\": %d,\n"
             "  \"n_head\": %d,\n"
             "  \"n_inner\": null,\n"
             "  \"activation_function\": \"gelu_new\",\n"
             "  \"layer_norm_epsilon\": 1e-05,\n"
             "  \"resid_pdrop\": 0.0,\n"
             "  \"embd_pdrop\": 0.0,\n"
             "  \"attn_pdrop\": 0.0,\n"
             "  \"initializer_range\": 0.02,\n"
             "  \"scale_attn_weights\": true,\n"
             "  \"tie_word_embeddings\": true,\n"
             "  \"bos_token_id\": %s,\n"
             "  \"eos_token_id\": %s,\n"
             "  \"torch_dtype\": \"%s\"\n"
             "}\n",
             v[3], v[4], v[4], v[2], v[0], v[1], eos_s, eos_s,
             dtype == ZERO_DTYPE_BF16 ? "bfloat16" : "float32");
    zero_status_t st = zero__write_file_atomic(dir, "config.json", text, strlen(text));
    *written = !st;
    return st;
}

/* OUT as given: a directory (existing, or with a trailing '/') gets model.safetensors; a file
 * name is used as it is. dir_out: the directory config.json goes to. */
static int output_paths(const char *out, char *file, size_t file_size, char *dir, size_t dir_size) {
    struct stat sb;
    const size_t n = strlen(out);
    if ((n && out[n - 1] == '/') || (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode))) {
        if (zero__mkdir_p(out)) return -1;
        snprintf(dir, dir_size, "%.*s", (int)(n > 1 && out[n - 1] == '/' ? n - 1 : n), out);
        snprintf(file, file_size, "%s/model.safetensors", dir);
        return 0;
    }
    snprintf(file, file_size, "%s", out);
    zero__dir_of(out, dir, dir_size);
    return 0;
}

int zero__cli_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    zero_dtype_t dtype = ZERO_DTYPE_FP32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dtype")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zero convert: --dtype needs a value (fp32 or bf16)\n");
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(v, "fp32"))
                dtype = ZERO_DTYPE_FP32;
            else if (!strcmp(v, "bf16"))
                dtype = ZERO_DTYPE_BF16;
            else {
                fprintf(stderr,
                        "zero convert: --dtype %s is not supported (expected fp32 or "
                        "bf16)\n",
                        v);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "zero convert: unknown option '%s' (try `zero convert --help`)\n",
                    argv[i]);
            return 2;
        } else if (!in) {
            in = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            fprintf(stderr, "zero convert: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!in || !out) {
        usage(stderr);
        return 2;
    }
    double t0 = zero_time_now();
    char dir[4096], file[4096 + 32];
    if (output_paths(out, file, sizeof file, dir, sizeof dir)) {
        fprintf(stderr, "zero convert: %s\n", zero_last_error());
        return 1;
    }
    zero_ckpt_t *c = NULL;
    int config_written = 0;
    zero_status_t st = zero_ckpt_open(&c, in);
    if (st == ZERO_OK) st = zero_ckpt_export_safetensors(c, zero__gpt_names(), file, dtype);
    if (st == ZERO_OK) st = write_hf_config(c, dir, dtype, &config_written);
    if (st != ZERO_OK) {
        fprintf(stderr, "zero convert: %s\n", zero_last_error());
        if (st == ZERO_ERR_FORMAT)
            fprintf(stderr, "hint: the checkpoint is damaged or incomplete; try an older one "
                            "(step-* directories beside it)\n");
        zero_ckpt_close(c);
        return 1;
    }
    printf("zero convert: %s (step %lld, saved at world %d) -> %s (%s) in %.2f s, peak RSS %.1f "
           "MiB\n",
           zero_ckpt_path(c), (long long)zero_ckpt_get_meta(c)->step, zero_ckpt_world(c), file,
           zero_dtype_name(dtype), zero_time_now() - t0, zero_peak_rss_bytes() / 1048576.0);
    if (config_written)
        printf("zero convert: %s/config.json written (Hugging Face GPT2Config)\n", dir);
    else
        printf("zero convert: no config.json: Hugging Face's GPT2Config describes dense GPT "
               "models only\n");
    zero_ckpt_close(c);
    return 0;
}
