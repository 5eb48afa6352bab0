/* generate.c — text from a trained GPT through the public header zero/zero.h only: load a
 * checkpoint or a safetensors file (zero_generator_init), prefill the prompt, then sample a token
 * and step the KV cache one token at a time (zero_sample, zero_generator_step).
 *
 * usage: example_generate MODEL [PROMPT] [NEW_TOKENS] [SEED]
 * MODEL is a zero checkpoint (or save) directory or a safetensors file with Hugging Face GPT-2
 * names; the prompt's bytes are its tokens (the trainer's byte-level text). With a SEED the
 * tokens are sampled at temperature 0.8 with top-k 40; without, greedily. Prints the prompt and
 * its continuation, then the decode rate on stderr. Exit code 0 when the requested tokens (or
 * as many as the model's context allows) came out.
 */
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [PROMPT] [NEW_TOKENS] [SEED]\n", argv[0]);
        return 2;
    }
    const char *text = argc > 2 ? argv[2] : "\n";
    const int plen = (int)strlen(text), n_new = argc > 3 ? atoi(argv[3]) : 64;
    zero_sample_params_t sp = zero_sample_params_default();
    sp.greedy = argc <= 4;
    sp.temperature = 0.8f;
    sp.top_k = 40;
    uint64_t rng = argc > 4 ? strtoull(argv[4], NULL, 10) : 0;
    if (plen < 1 || n_new < 1) {
        fprintf(stderr, "the prompt and NEW_TOKENS must not be empty\n");
        return 2;
    }

    zero_generator_params_t gp = zero_generator_params_default();
    gp.max_seq =
        plen + n_new - 1; /* the cache holds every token fed back (capped at the context) */
    zero_generator_t *g = NULL;
    if (zero_generator_init(&g, argv[1], &gp) != ZERO_OK) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], zero_last_error());
        return 1;
    }
    const zero_generator_info_t *info = zero_generator_info(g);
    int32_t *prompt = malloc((size_t)plen * sizeof *prompt);
    for (int i = 0; i < plen; i++) prompt[i] = (unsigned char)text[i];

    const float *logits = NULL;
    zero_status_t st = zero_generator_prefill(g, prompt, plen, &logits);
    fputs(text, stdout);
    int n = 0;
    double t0 = zero_time_now();
    while (st == ZERO_OK) {
        int32_t tok;
        st = zero_sample(logits, info->vocab, &sp, &rng, &tok);
        if (st != ZERO_OK) break;
        putchar(info->vocab <= 256 ? tok : '?');
        fflush(stdout);
        /* stop after the last token asked for, or when the cache (the context) is full */
        if (++n == n_new || zero_generator_position(g) == info->max_seq) break;
        st = zero_generator_step(g, &tok, &logits);
    }
    double dt = zero_time_now() - t0;
    putchar('\n');
    if (st != ZERO_OK)
        fprintf(stderr, "generation failed: %s\n", zero_last_error());
    else
        fprintf(stderr, "%d tokens, %.0f tokens/s; weights %.1f MiB, KV cache %.1f MiB\n", n,
                dt > 0 ? n / dt : 0.0, info->weight_bytes / 1048576.0,
                info->kv_cache_bytes / 1048576.0);
    free(prompt);
    zero_generator_free(g);
    return st == ZERO_OK && n > 0 ? 0 : 1;
}
