/* generate.c — `zero generate --model CKPT|FILE.safetensors --prompt TEXT|--prompt-file F ...`:
 * text from a trained GPT with a KV cache (zero/generate.h), then time to first token, decode
 * tokens/s and memory.
 *
 * With --tokenizer (a GPT-2 BPE tokenizer, docs/tokenizer.md) the prompt is encoded and the
 * output decoded with it (cli/tokens.c). Without, tokens are bytes, as the trainer's text data:
 * the prompt's bytes are its token ids (each must be below the model's vocabulary), and a model
 * of at most 256 tokens prints bytes; a larger vocabulary prints token ids. Text goes to stdout,
 * the figures to stderr
 * (--json: one object on stdout instead). Not here: the decoding (src/infer).
 */
#include "cli/cli.h"
#include "cli/tokens.h"
#include "train/config.h"
#include "zero/zero.h"

#include <cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zero generate --model CKPT_DIR|FILE.safetensors (--prompt TEXT | --prompt-file "
        "F)\n"
        "                     [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
        "                     [--seed S] [--batch B] [--greedy] [--stream] [--json]\n"
        "                     [--dtype fp32|bf16] [--weights int8|int4] [--group-size G]\n"
        "                     [--offload none|nvme] [--nvme-path DIR] [--buffer-count N]\n"
        "                     [--config FILE] [--threads N] [--ranks N] [--heads H]\n"
        "                     [--tokenizer FILE]\n\n"
        "  --model           a checkpoint directory (step-00000123), a save directory (its\n"
        "                    `latest`), SAVE_DIR/latest, or a safetensors file with Hugging\n"
        "                    Face GPT-2 names (zero convert's, or another's)\n"
        "  --prompt          the prompt text (encoded with --tokenizer, else its bytes are its\n"
        "                    tokens; empty with --tokenizer: its end-of-text token)\n"
        "  --prompt-file     read the prompt from a file instead\n"
        "  --max-new-tokens  tokens to generate per sequence (default 64); generation stops\n"
        "                    earlier at the model's context\n"
        "  --temperature     softmax temperature (default 1.0; 0 is greedy)\n"
        "  --top-k           keep the K likeliest tokens (default 0: all)\n"
        "  --top-p           then the likeliest whose probability reaches P (default 1: all)\n"
        "  --seed            seed of the sampling (default 1337); sequence b draws from\n"
        "                    seed + b\n"
        "  --batch           sequences generated side by side from the same prompt (1)\n"
        "  --greedy          the likeliest token every time (no sampling)\n"
        "  --stream          print tokens as they come (batch 1)\n"
        "  --json            one JSON object on stdout: the text, the tokens and the figures\n"
        "  --dtype           weights, activations and KV cache: fp32 (default) or bf16\n"
        "                    (weights rounded to nearest even: half the bytes per step)\n"
        "  --weights         int8 or int4: the weight matrices quantized group-wise\n"
        "                    (symmetric, one fp32 scale per group; activations fp32)\n"
        "  --group-size      input features per scale of --weights (default 64; even, <= 1024)\n"
        "  --offload         nvme: the blocks' weights in a file under --nvme-path, read layer\n"
        "                    by layer just in time with the next ones prefetched (default none)\n"
        "  --nvme-path       directory of that file (deleted at the end)\n"
        "  --buffer-count    layers resident at once with --offload nvme (default 4; >= 2)\n"
        "  --config          a zero train / DeepSpeed config: its\n"
        "                    zero_optimization.offload_param (device, nvme_path, buffer_count)\n"
        "                    sets the three above (the flags win)\n"
        "  --threads         cores per rank (default: all, shared by the ranks of a machine)\n"
        "  --ranks           shard the blocks' weights over N ranks (threads of this process;\n"
        "                    under mpirun the MPI job's ranks): each holds 1/N of them and\n"
        "                    all-gathers every layer just in time; rank 0 prints\n"
        "  --heads           attention heads of a safetensors file that does not say (default:\n"
        "                    zero convert's metadata, config.json beside the file, dim / 64)\n"
        "  --tokenizer       GPT-2 BPE tokenizer for the prompt and the output: a vocab.json\n"
        "                    (merges.txt beside it), a tokenizer.json, a directory, or llm.c's\n"
        "                    gpt2_tokenizer.bin (decoding only: an empty prompt)\n\n"
        "The KV cache is in RAM. Unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set,\n"
        "threads sleep between parallel regions (passive; the program restarts itself\n"
        "to set it), after a short spin (GOMP_SPINCOUNT 3000) when the cores the run\n"
        "uses were idle at start.\n"
        "docs/inference.md has the details.\n");
}

/* "int8" / "int4" for quantized weights, else the dtype's name. */
static const char *weights_name(const zero_generator_info_t *in) {
    return in->weight_bits == 8   ? "int8"
           : in->weight_bits == 4 ? "int4"
                                  : zero_dtype_name(in->dtype);
}

typedef struct opts {
    const char *model, *prompt, *prompt_file, *offload, *nvme_path, *config;
    int buffer_count;
    int max_new, top_k, batch, greedy, stream, json, threads, heads, weight_bits, group_size;
    zero_dtype_t dtype;
    double temperature, top_p;
    uint64_t seed;
    const char *tokenizer;
    int ranks;         /* --ranks (0: not given) */
    int threads_given; /* --threads was given (else all cores, shared by the ranks of a node) */
} opts_t;

/* --offload, --nvme-path, --buffer-count over --config's offload_param; exit status 2 (bad
 * flags) or 1 (a bad file), or -1 to go on. */
static int offload_from_config(opts_t *o) {
    static char path[ZERO_CONFIG_STR_MAX]; /* outlives the config: o->nvme_path may point here */
    /* the flags' own values: a path or buffer count without --offload nvme is a mistake on the
     * command line, not when it comes from a config that --offload none overrides */
    const int flag_path = o->nvme_path != NULL, flag_buffers = o->buffer_count != 0;
    if (o->config) {
        zero_train_config_t *cfg = malloc(sizeof *cfg);
        if (!cfg) return 1;
        zero__train_config_default(cfg);
        zero__train_config_quiet(1);
        if (zero__train_config_load(cfg, o->config)) {
            fprintf(stderr, "zero generate: %s\n", zero_last_error());
            free(cfg);
            return 1;
        }
        if (!strcmp(cfg->offload_param, "nvme")) {
            snprintf(path, sizeof path, "%s", cfg->param_nvme_path);
            if (!o->offload) o->offload = "nvme";
            if (!o->nvme_path && path[0]) o->nvme_path = path;
            if (!o->buffer_count) o->buffer_count = cfg->param_buffer_count;
        }
        free(cfg);
    }
    const int nvme = o->offload && !strcmp(o->offload, "nvme");
    const char *bad = nvme && !o->nvme_path ? "--offload nvme needs --nvme-path DIR"
                      : !nvme && flag_path
                          ? "--nvme-path is for --offload nvme (the weights are in RAM otherwise)"
                      : !nvme && flag_buffers ? "--buffer-count is for --offload nvme"
                                              : NULL;
    if (bad) {
        fprintf(stderr, "zero generate: %s (try `zero generate --help`)\n", bad);
        return 2;
    }
    if (!nvme) o->nvme_path = NULL, o->buffer_count = 0;
    return -1;
}

static int parse(int argc, char **argv, opts_t *o) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (opts_t){NULL, NULL,
                  NULL, NULL,
                  NULL, NULL,
                  0,    64,
                  0,    1,
                  0,    0,
                  0,    cores > 0 ? (int)cores : 1,
                  0,    0,
                  64,   ZERO_DTYPE_FP32,
                  1.0,  1.0,
                  1337, NULL,
                  0,    0};
    const char *const prog = "zero generate";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--greedy")) {
            o->greedy = 1;
        } else if (!strcmp(a, "--stream")) {
            o->stream = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--model"))) {
            o->model = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--prompt"))) {
            o->prompt = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--prompt-file"))) {
            o->prompt_file = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--max-new-tokens"))) {
            if (!zero__cli_number(prog, a, v, 1, 1, &d)) return 2;
            o->max_new = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--temperature"))) {
            if (!zero__cli_number(prog, a, v, 0, 0, &o->temperature)) return 2;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--top-k"))) {
            if (!zero__cli_number(prog, a, v, 0, 1, &d)) return 2;
            o->top_k = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--top-p"))) {
            if (!zero__cli_number(prog, a, v, 0, 0, &o->top_p)) return 2;
            if (!(o->top_p > 0 && o->top_p <= 1)) {
                fprintf(stderr, "zero generate: --top-p '%s' is invalid (expected 0 < P <= 1)\n",
                        v);
                return 2;
            }
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--seed"))) {
            if (!zero__cli_number(prog, a, v, 0, 1, &d)) return 2;
            o->seed = (uint64_t)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--batch"))) {
            if (!zero__cli_number(prog, a, v, 1, 1, &d)) return 2;
            o->batch = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--threads"))) {
            if (!zero__cli_number(prog, a, v, 1, 1, &d)) return 2;
            o->threads = (int)d;
            o->threads_given = 1;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--ranks"))) {
            if (!zero__cli_number(prog, a, v, 1, 1, &d)) return 2;
            o->ranks = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--dtype"))) {
            if (!strcmp(v, "fp32") || !strcmp(v, "bf16")) {
                o->dtype = !strcmp(v, "bf16") ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32;
            } else {
                fprintf(stderr, "zero generate: --dtype '%s' is invalid (expected fp32 or bf16)\n",
                        v);
                return 2;
            }
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--weights"))) {
            if (!strcmp(v, "int8") || !strcmp(v, "int4")) {
                o->weight_bits = !strcmp(v, "int8") ? 8 : 4;
            } else {
                fprintf(stderr,
                        "zero generate: --weights '%s' is invalid (expected int8 or int4)\n", v);
                return 2;
            }
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--group-size"))) {
            if (!zero__cli_number(prog, a, v, 2, 1, &d)) return 2;
            if ((long long)d % 2 || d > 1024) {
                fprintf(stderr,
                        "zero generate: --group-size '%s' is invalid (expected an even number "
                        "from 2 to 1024)\n",
                        v);
                return 2;
            }
            o->group_size = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--offload"))) {
            if (strcmp(v, "none") && strcmp(v, "nvme")) {
                fprintf(stderr,
                        "zero generate: --offload '%s' is invalid (expected none or nvme)\n", v);
                return 2;
            }
            o->offload = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--nvme-path"))) {
            o->nvme_path = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--buffer-count"))) {
            if (!zero__cli_number(prog, a, v, 2, 1, &d)) return 2;
            o->buffer_count = (int)d;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--config"))) {
            o->config = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--tokenizer"))) {
            o->tokenizer = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--heads"))) {
            if (!zero__cli_number(prog, a, v, 1, 1, &d)) return 2;
            o->heads = (int)d;
        } else {
            fprintf(stderr, "zero generate: unknown option '%s' (try `zero generate --help`)\n", a);
            return 2;
        }
    }
    const char *bad = !o->model                       ? "--model is required"
                      : !o->prompt == !o->prompt_file ? "give one of --prompt and --prompt-file"
                      : o->stream && o->json          ? "--stream and --json exclude each other"
                      : o->stream && o->batch > 1 ? "--stream prints one sequence: use --batch 1"
                      : o->weight_bits && o->dtype != ZERO_DTYPE_FP32
                          ? "--weights runs on fp32 activations: drop --dtype bf16"
                          : NULL;
    if (bad) {
        fprintf(stderr, "zero generate: %s (try `zero generate --help`)\n", bad);
        return 2;
    }
    return offload_from_config(o);
}

/* The prompt's bytes (malloc'd) and their count, from --prompt or --prompt-file. */
static unsigned char *read_prompt(const opts_t *o, size_t *n) {
    if (o->prompt) {
        *n = strlen(o->prompt);
        unsigned char *p = malloc(*n + 1);
        if (p) memcpy(p, o->prompt, *n + 1);
        return p;
    }
    FILE *f = fopen(o->prompt_file, "rb");
    if (!f) {
        fprintf(stderr, "zero generate: cannot read --prompt-file %s\n", o->prompt_file);
        return NULL;
    }
    size_t cap = 4096, len = 0, got;
    unsigned char *p = malloc(cap);
    while (p && (got = fread(p + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *q = realloc(p, cap *= 2);
            if (!q) free(p);
            p = q;
        }
    }
    fclose(f);
    *n = len;
    return p;
}

/* One rank's generation (comm NULL: the only one): the generator, the prompt prefilled, tokens
 * sampled and fed until max_new or the context; rank 0 prints the text and the figures. Every
 * rank samples the same tokens from the same logits (zero/generate.h), so they stay in step. */
static int generate_on(const opts_t *o, const unsigned char *text, size_t text_len,
                       const int32_t *ptok, size_t plen, const zero_tokenizer_t *tok,
                       zero_comm_t *comm) {
    const int rank = comm ? zero_comm_rank(comm) : 0, ranks = comm ? zero_comm_size(comm) : 1;
    int rc = 1;
    zero_generator_t *g = NULL;
    int32_t *prompt = NULL, *out = NULL;
    uint64_t *rng = NULL;
    zero_generator_params_t gp = zero_generator_params_default();
    gp.batch = o->batch;
    gp.comm = comm;
    /* the cores shared by the ranks of this node unless --threads says */
    const int per_node = ranks / (comm ? zero_comm_node_count(comm) : 1);
    int threads = o->threads;
    if (!o->threads_given) threads = o->threads / per_node > 1 ? o->threads / per_node : 1;
    gp.threads = threads;
    gp.heads = o->heads;
    gp.dtype = o->dtype;
    gp.weight_bits = o->weight_bits;
    gp.group_size = o->group_size;
    gp.nvme_path = o->nvme_path;
    if (o->buffer_count) gp.buffer_count = o->buffer_count;
    /* the cache holds the prompt and every new token but the last (capped at the context) */
    gp.max_seq = plen + (size_t)o->max_new - 1 > (size_t)1 << 30 ? 0 : (int)plen + o->max_new - 1;
    double t0 = zero_time_now();
    zero_status_t st = zero_generator_init(&g, o->model, &gp);
    if (st) {
        if (!rank) fprintf(stderr, "zero generate: %s\n", zero_last_error());
        if (!rank && (st == ZERO_ERR_MISMATCH || st == ZERO_ERR_FORMAT))
            fprintf(stderr, "hint: --model takes a zero checkpoint or a safetensors file with "
                            "Hugging Face GPT-2 names (zero convert writes one)\n");
        goto done;
    }
    const double load_s = zero_time_now() - t0;
    const zero_generator_info_t *in = zero_generator_info(g);
    const int B = in->batch, V = in->vocab, P = (int)plen;
    for (size_t i = 0; i < plen; i++)
        if (tok && ptok[i] >= V) {
            fprintf(stderr,
                    "zero generate: prompt token %d (the %zu-th) is outside the model's "
                    "vocabulary of %d tokens (expected --tokenizer '%s', of %d tokens, to be the "
                    "model's)\n",
                    (int)ptok[i], i, V, o->tokenizer, zero_tokenizer_vocab(tok));
            goto done;
        } else if (ptok[i] >= V) {
            fprintf(stderr,
                    "zero generate: prompt byte 0x%02x at offset %zu is outside the model's "
                    "vocabulary of %d tokens (the prompt's bytes are its tokens: expected bytes "
                    "below %d)\n",
                    (unsigned)ptok[i], i, V, V);
            goto done;
        }
    if (plen > (size_t)in->seq) {
        fprintf(stderr,
                "zero generate: the prompt of %zu tokens is longer than the model's context of "
                "%d (model.seq; expected at most %d bytes)\n",
                plen, in->seq, in->seq);
        goto done;
    }
    prompt = malloc((size_t)B * plen * sizeof *prompt);
    out = malloc((size_t)B * (size_t)o->max_new * sizeof *out);
    rng = malloc((size_t)B * sizeof *rng);
    if (!prompt || !out || !rng) {
        if (!rank) fprintf(stderr, "zero generate: out of memory\n");
        goto done;
    }
    for (int b = 0; b < B; b++) {
        for (size_t i = 0; i < plen; i++) prompt[(size_t)b * plen + i] = ptok[i];
        rng[b] = o->seed + (uint64_t)b;
    }
    zero_sample_params_t sp = zero_sample_params_default();
    sp.greedy = o->greedy;
    sp.temperature = (float)o->temperature;
    sp.top_k = o->top_k;
    sp.top_p = (float)o->top_p;
    if (o->stream && !rank) {
        fwrite(text, 1, text_len, stdout);
        fflush(stdout);
    }
    /* prefill, then sample and feed one token per sequence until max_new or the cache is full */
    const float *lg = NULL;
    t0 = zero_time_now();
    st = zero_generator_prefill(g, prompt, P, &lg);
    double ttft = 0, t_first = 0;
    int n = 0;
    while (!st) {
        int32_t *row = out + (size_t)n * (size_t)B; /* (n, B): step n's tokens */
        for (int b = 0; b < B && !st; b++)
            st = zero_sample(lg + (size_t)b * (size_t)V, V, &sp, &rng[b], &row[b]);
        if (st) break;
        if (++n == 1) t_first = zero_time_now(), ttft = t_first - t0;
        if (o->stream && !rank) {
            zero__cli_put_token(stdout, row[0], V, tok);
            fflush(stdout);
        }
        if (n == o->max_new || zero_generator_position(g) == in->max_seq) break;
        st = zero_generator_step(g, row, &lg);
    }
    const double decode_s = n > 1 ? zero_time_now() - t_first : 0;
    if (st) {
        if (!rank) fprintf(stderr, "zero generate: %s\n", zero_last_error());
        goto done;
    }
    const int stopped_at_context = n < o->max_new;
    const double decode_tps = decode_s > 0 ? (double)(n - 1) * B / decode_s : 0;
    const double peak = (double)zero_peak_rss_bytes();
    if (rank) {
        /* rank 0 prints */
    } else if (o->json) {
        cJSON *j = cJSON_CreateObject(), *outs = cJSON_AddArrayToObject(j, "outputs");
        cJSON *toks = cJSON_AddArrayToObject(j, "tokens");
        int32_t *seq = malloc((size_t)n * sizeof *seq + 1);
        for (int b = 0; b < B && seq; b++) {
            for (int i = 0; i < n; i++) seq[i] = out[(size_t)i * (size_t)B + (size_t)b];
            cJSON_AddItemToArray(outs, zero__cli_tokens_json(seq, (size_t)n, V, tok));
            cJSON_AddItemToArray(toks, cJSON_CreateIntArray(seq, n));
        }
        free(seq);
        cJSON_AddStringToObject(j, "model", o->model);
        cJSON_AddStringToObject(j, "format", in->format);
        cJSON_AddStringToObject(j, "dtype", zero_dtype_name(in->dtype));
        cJSON_AddStringToObject(j, "weights", weights_name(in));
        cJSON_AddStringToObject(j, "offload", in->offload);
        /* how threads waited between parallel regions (the policy chosen at start, or the user's)
         */
        const char *wp = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
        char wait[96];
        snprintf(wait, sizeof wait, "%s%s%s", wp ? wp : "default", spin ? ", GOMP_SPINCOUNT " : "",
                 spin ? spin : "");
        cJSON_AddStringToObject(j, "openmp_wait", wait);
        if (in->io_engine) cJSON_AddStringToObject(j, "io_engine", in->io_engine);
        const struct {
            const char *k;
            double v;
        } nums[] = {{"layers", in->layers},
                    {"heads", in->heads},
                    {"dim", in->dim},
                    {"vocab", V},
                    {"context", in->seq},
                    {"params", (double)in->param_count},
                    {"batch", B},
                    {"threads", threads},
                    {"ranks", ranks},
                    {"gather_bytes", (double)in->gather_bytes},
                    {"gather_wait_s", in->gather_wait_s},
                    {"prompt_tokens", P},
                    {"new_tokens", n},
                    {"load_s", load_s},
                    {"ttft_s", ttft},
                    {"prefill_tokens_per_s", ttft > 0 ? (double)P * B / ttft : 0},
                    {"decode_s", decode_s},
                    {"decode_tokens_per_s", decode_tps},
                    {"group_size", in->group_size},
                    {"resident_weight_bytes", (double)in->resident_weight_bytes},
                    {"buffer_count", in->buffer_count},
                    {"io_bytes_read", (double)in->io_bytes_read},
                    {"io_wait_s", in->io_wait_s},
                    {"peak_rss_bytes", peak},
                    {"weight_bytes", (double)in->weight_bytes},
                    {"kv_cache_bytes", (double)in->kv_cache_bytes},
                    {"activation_bytes", (double)in->activation_bytes}};
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
            cJSON_AddNumberToObject(j, nums[i].k, nums[i].v);
        cJSON_AddStringToObject(j, "stopped", stopped_at_context ? "context" : "max_new_tokens");
        cJSON *s = cJSON_AddObjectToObject(j, "sampling");
        cJSON_AddBoolToObject(s, "greedy", o->greedy);
        cJSON_AddNumberToObject(s, "temperature", o->temperature);
        cJSON_AddNumberToObject(s, "top_k", o->top_k);
        cJSON_AddNumberToObject(s, "top_p", o->top_p);
        cJSON_AddNumberToObject(s, "seed", (double)o->seed);
        char *txt = cJSON_Print(j);
        if (txt) printf("%s\n", txt);
        free(txt);
        cJSON_Delete(j);
    } else {
        for (int b = 0; b < B && !o->stream; b++) {
            if (B > 1) printf("---- sequence %d\n", b);
            fwrite(text, 1, text_len, stdout);
            for (int i = 0; i < n; i++)
                zero__cli_put_token(stdout, out[(size_t)i * (size_t)B + (size_t)b], V, tok);
            printf("\n");
        }
        if (o->stream) printf("\n");
        fflush(stdout);
        if (stopped_at_context)
            if (!rank)
                fprintf(stderr, "zero generate: stopped at the model's context of %d positions\n",
                        in->seq);
        fprintf(stderr,
                "zero generate: %s, %d layers x dim %d, %zu parameters, loaded in %.2f s\n"
                "  prompt %d tokens x batch %d: time to first token %.2f ms (prefill %.0f "
                "tokens/s)\n"
                "  decode: %d tokens x batch %d in %.3f s, %.1f tokens/s (%d threads)\n"
                "  memory: peak RSS %.1f MiB, weights %.1f MiB (%s), KV cache %.1f MiB (%d "
                "positions x batch %d), working buffers %.1f MiB\n",
                in->format, in->layers, in->dim, in->param_count, load_s, P, B, ttft * 1e3,
                ttft > 0 ? (double)P * B / ttft : 0, n > 0 ? n - 1 : 0, B, decode_s, decode_tps,
                threads, peak / 1048576.0, (double)in->weight_bytes / 1048576.0, weights_name(in),
                (double)in->kv_cache_bytes / 1048576.0, in->max_seq, B,
                (double)in->activation_bytes / 1048576.0);
        if (ranks > 1)
            fprintf(stderr,
                    "  weights sharded over %d ranks: %.1f MiB resident on rank 0 of %.1f, %.1f "
                    "MiB all-gathered, %.3f s waited for the gathers\n",
                    ranks, (double)in->resident_weight_bytes / 1048576.0,
                    (double)in->weight_bytes / 1048576.0, (double)in->gather_bytes / 1048576.0,
                    in->gather_wait_s);
        if (in->io_engine)
            fprintf(stderr,
                    "  weights streamed from %s (%s): %.1f MiB resident of %.1f (%d layer "
                    "buffers), %.1f MiB read, %.3f s waited for reads\n",
                    o->nvme_path, in->io_engine, (double)in->resident_weight_bytes / 1048576.0,
                    (double)in->weight_bytes / 1048576.0, in->buffer_count,
                    (double)in->io_bytes_read / 1048576.0, in->io_wait_s);
    }
    rc = 0;
done:
    zero_generator_free(g);
    free(prompt);
    free(out);
    free(rng);
    return rc;
}

typedef struct rank_job {
    const opts_t *o;
    const unsigned char *text;
    size_t text_len;
    const int32_t *ptok;
    size_t plen;
    const zero_tokenizer_t *tok;
    zero_comm_t *comm;
    int rc;
    pthread_t tid;
} rank_job_t;

static void *rank_main(void *arg) {
    rank_job_t *j = arg;
    j->rc = generate_on(j->o, j->text, j->text_len, j->ptok, j->plen, j->tok, j->comm);
    return NULL;
}

/* --ranks N thread ranks (rank 0 on this thread), the MPI job's ranks under a launcher, or one. */
static int generate_ranks(const opts_t *o, const unsigned char *text, size_t text_len,
                          const int32_t *ptok, size_t plen, const zero_tokenizer_t *tok) {
    if (zero_comm_mpi_launched()) {
        zero_comm_t *comm = NULL;
        zero_comm_params_t cp = zero_comm_params_default();
        if (zero_comm_mpi_init(&comm, &cp)) {
            fprintf(stderr, "zero generate: %s\n", zero_last_error());
            return 1;
        }
        int rc = 0;
        if (o->ranks && o->ranks != zero_comm_size(comm)) {
            if (!zero_comm_rank(comm))
                fprintf(stderr,
                        "zero generate: --ranks %d but the MPI job has %d ranks (expected the "
                        "same, or no --ranks under mpirun)\n",
                        o->ranks, zero_comm_size(comm));
            rc = 2;
        }
        if (!rc) rc = generate_on(o, text, text_len, ptok, plen, tok, comm);
        zero_comm_free(comm);
        if (!rc)
            zero_comm_mpi_finalize();
        else
            zero_comm_mpi_abort(rc); /* a rank left waiting in a collective would hang */
        return rc;
    }
    const int n = o->ranks ? o->ranks : 1;
    if (n == 1) return generate_on(o, text, text_len, ptok, plen, tok, NULL);
    zero_comm_t **comms = calloc((size_t)n, sizeof *comms);
    rank_job_t *jobs = calloc((size_t)n, sizeof *jobs);
    zero_comm_params_t cp = zero_comm_params_default();
    int rc = 1;
    if (!comms || !jobs || zero_comm_threads_init_all(n, comms, &cp)) {
        fprintf(stderr, "zero generate: cannot set up %d ranks: %s\n", n, zero_last_error());
        free(comms);
        free(jobs);
        return 1;
    }
    int started = 1;
    for (int k = 0; k < n; k++)
        jobs[k] = (rank_job_t){o, text, text_len, ptok, plen, tok, comms[k], 1, 0};
    for (int k = 1; k < n && started == k; k++)
        if (pthread_create(&jobs[k].tid, NULL, rank_main, &jobs[k]) == 0) started++;
    if (started == n) {
        rank_main(&jobs[0]);
        rc = 0;
    } else { /* the started ranks give up at the collective timeout */
        fprintf(stderr, "zero generate: cannot start the thread of rank %d\n", started);
    }
    for (int k = 1; k < started; k++) pthread_join(jobs[k].tid, NULL);
    for (int k = 0; k < n && !rc; k++) rc = jobs[k].rc;
    for (int k = 0; k < n; k++) zero_comm_free(comms[k]);
    free(comms);
    free(jobs);
    return rc;
}

int zero__cli_generate(int argc, char **argv) {
    opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    /* How threads wait between parallel regions (a decode step is ~60 short ones): asleep
     * (passive), each region pays a wake-up, 45% of an int8 step on an idle machine; spinning
     * without bound made decoding 5x slower where other processes used the cores. So threads
     * spin a short while (GOMP_SPINCOUNT 3000) and then sleep when the cores this run uses were
     * idle at start (others' load over 0.1 s of /proc/stat), and sleep at once otherwise. The
     * user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins. */
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) {
        const double cores = (double)sysconf(_SC_NPROCESSORS_ONLN);
        const double used = o.threads_given ? (double)o.threads * (o.ranks ? o.ranks : 1) : cores;
        const double busy = zero__cli_busy_cores(100);
        if (busy >= 0 && busy + (used < cores ? used : cores) <= cores + 0.25)
            setenv("GOMP_SPINCOUNT", "3000", 1);
    }
    zero__cli_openmp_wait("passive");
    size_t text_len = 0, plen = 0;
    unsigned char *text = read_prompt(&o, &text_len);
    if (!text) return 1;
    rc = 1;
    zero_tokenizer_t *tok = NULL;
    int32_t *ptok = NULL;
    if (o.tokenizer && zero_tokenizer_init(&tok, o.tokenizer)) {
        fprintf(stderr, "zero generate: %s\n", zero_last_error());
        goto done;
    }
    if (text_len == 0 && !(tok && zero_tokenizer_eot(tok) >= 0)) {
        fprintf(stderr, "zero generate: the prompt is empty (expected at least one byte)\n");
        goto done;
    }
    if (text_len > (size_t)1 << 30) {
        fprintf(stderr, "zero generate: the prompt of %zu bytes is too long\n", text_len);
        goto done;
    }
    if (text_len == 0) { /* GPT-2's unconditional generation starts at <|endoftext|> */
        ptok = malloc(sizeof *ptok);
        if (ptok) ptok[0] = zero_tokenizer_eot(tok), plen = 1;
    } else {
        ptok = zero__cli_prompt_tokens(text, text_len, tok, &plen);
    }
    if (!ptok) goto done;
    rc = generate_ranks(&o, text, text_len, ptok, plen, tok);
done:
    free(ptok);
    zero_tokenizer_free(tok);
    free(text);
    return rc;
}
