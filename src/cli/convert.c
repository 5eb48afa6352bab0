/* convert.c — `zero convert CHECKPOINT OUT.safetensors [--dtype fp32|bf16]`: export a checkpoint's
 * fp32 master weights to one safetensors file with Hugging Face GPT-2 names and layouts (the GPT
 * model's name map, zero__gpt_names); MoE layers' tensors keep zero's names under h.N.moe., the
 * experts stacked (E, ...), not split per expert.
 *
 * CHECKPOINT is a checkpoint directory, a save directory (its `latest` is used) or DIR/latest.
 * The export streams (memory about one Conv1D weight plus small buffers) and verifies the
 * checksum of every chunk it reads; the optimizer state is not read.
 */
#include "cli/cli.h"
#include "model/gpt.h"
#include "zero/zero.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: zero convert CHECKPOINT OUT.safetensors [--dtype fp32|bf16]\n\n"
            "  CHECKPOINT   a checkpoint directory (step-00000123), a save directory (its\n"
            "               `latest` is followed) or SAVE_DIR/latest\n"
            "  --dtype      element type of the output: fp32 (default, exact) or bf16\n"
            "               (round to nearest even)\n\n"
            "Writes Hugging Face GPT-2 names and layouts (wte.weight, h.0.attn.c_attn.weight in\n"
            "Conv1D [in, out] layout, ..., ln_f.bias); an MoE layer's router and experts keep\n"
            "zero's names, h.N.moe.*, the experts stacked along dimension 0 (docs/moe.md).\n"
            "Check with tools/safetensors_check.py.\n");
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
    zero_ckpt_t *c = NULL;
    zero_status_t st = zero_ckpt_open(&c, in);
    if (st == ZERO_OK) st = zero_ckpt_export_safetensors(c, zero__gpt_names(), out, dtype);
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
           zero_ckpt_path(c), (long long)zero_ckpt_get_meta(c)->step, zero_ckpt_world(c), out,
           zero_dtype_name(dtype), zero_time_now() - t0, zero_peak_rss_bytes() / 1048576.0);
    zero_ckpt_close(c);
    return 0;
}
