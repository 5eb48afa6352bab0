/* plan.c — `zero plan`: print every way to run a config on a machine (src/plan/plan.h) with its
 * memory, disk, traffic and step time, which fit and which is fastest; `zero plan --calibrate`
 * times this machine for the time model and writes the calibration file.
 *
 * The model comes from --config, from flags (--layers ... or --params alone, which picks a
 * GPT-3-shaped model of that size), or both (flags win). Exit codes: 0 a configuration fits,
 * 1 none fits or an error, 2 a usage error.
 */
#include "cli/cli.h"
#include "core/core_internal.h"
#include "core/fileio.h"
#include "plan/plan.h"
#include "zero/zero.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GiB (1024.0 * 1024.0 * 1024.0)

/* Flags that set a config key. */
static const struct {
    const char *flag, *key;
} key_flags[] = {
    {"--layers", "model.layers"},
    {"--heads", "model.heads"},
    {"--dim", "model.dim"},
    {"--vocab", "model.vocab"},
    {"--seq", "model.seq"},
    {"--experts", "model.moe.experts"},
    {"--top-k", "model.moe.top_k"},
    {"--moe-every", "model.moe.every"},
    {"--batch", "train_batch_size"},
    {"--micro-batch", "train_micro_batch_size_per_gpu"},
    {"--stage", "zero_optimization.stage"},
};

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zero plan [--config FILE] [model flags] [machine flags] [--json] [--all]\n"
        "       zero plan --calibrate [--calibrate-dir DIR] [--calibration FILE]\n"
        "\n"
        "Every way to run a training config (ZeRO stage 0-3; offload none, optimizer, or\n"
        "optimizer + parameters to NVMe; ZeRO++ on/off; activation checkpointing on/off;\n"
        "micro-batch): per-rank RAM by category, disk, bytes on the wire per step inside and\n"
        "between nodes, and the estimated step time; which fit and which is fastest.\n"
        "\n"
        "model (over --config; without one, the defaults of `zero train`):\n"
        "  --params N           a GPT-3-shaped model of about N parameters (175e9) when\n"
        "                       --layers and --dim are not given: dim = 128 x layers\n"
        "  --layers N --heads N --dim N --vocab N --seq N\n"
        "  --experts E --top-k K --moe-every N   MoE layers (model.moe)\n"
        "  --batch N            global batch (train_batch_size, sequences per step)\n"
        "  --micro-batch N      the config's micro-batch (sets the global batch with --world\n"
        "                       when --batch is not given)\n"
        "  --dtype NAME         fp32, bf16 or fp16\n"
        "  --set KEY=VALUE      any config key\n"
        "machine (per node):\n"
        "  --world N            ranks (default: the config's train.ranks)\n"
        "  --ranks-per-node K   ranks sharing a node's RAM, disk, cores and link (default: all)\n"
        "  --ram GiB            RAM per node (default: this machine's MemAvailable)\n"
        "  --disk GiB           disk for swap files per node (default: free space of\n"
        "                       offload_optimizer.nvme_path)\n"
        "  --link GB/s          a node's link to the others (default: the calibration's)\n"
        "  --backend NAME       threads (one process of all ranks; the default on one node) or\n"
        "                       mpi (one process per rank; the default on several)\n"
        "  --threads N          compute threads per rank (default: train.threads, else cores /\n"
        "                       ranks per node)\n"
        "figures:\n"
        "  --calibration FILE   the calibration file (default: $ZERO_CALIBRATION, else\n"
        "                       ~/.cache/zero/calibration.json); absent: documented defaults\n"
        "  --calibrate          time this machine (GEMM, memcpy, disk) and write the file\n"
        "  --calibrate-dir DIR  where the disk test file goes (default: the current directory)\n"
        "  --calibrate-disk MiB size of the disk test file (default: 1024)\n"
        "output:\n"
        "  --json               the whole plan as JSON on stdout\n"
        "  --all                every row (default: the 20 fastest that fit, or the 10 smallest)\n"
        "\n"
        "docs/plan.md has the formulas and the time model's assumptions.\n");
}

static int parse_pos(const char *flag, const char *v, double *out) {
    char *end = NULL;
    double d = v && *v ? strtod(v, &end) : 0;
    if (!v || !*v || *end || !(d > 0) || !isfinite(d)) {
        fprintf(stderr, "zero plan: %s '%s' is invalid (expected a positive number)\n", flag,
                v ? v : "");
        return 0;
    }
    *out = d;
    return 1;
}

/* A GPT-3-shaped model of about psi parameters: 12 L C^2 + V C with C = 128 L. */
static void shape_from_params(zero_train_config_t *cfg, double psi) {
    const double V = cfg->model.vocab;
    int L = 1;
    for (int l = 1; l <= 512; l++) {
        const double C = 128.0 * l;
        if (12.0 * l * C * C + V * C > psi) break;
        L = l;
    }
    /* the layer count whose size is nearest */
    const double below = 12.0 * L * (128.0 * L) * (128.0 * L) + V * 128.0 * L,
                 above =
                     12.0 * (L + 1) * (128.0 * (L + 1)) * (128.0 * (L + 1)) + V * 128.0 * (L + 1);
    if (L < 512 && above - psi < psi - below) L++;
    cfg->model.layers = L;
    cfg->model.dim = 128 * L;
    cfg->model.heads = L;
}

static const char *fmt_count(char *buf, size_t n, double v) {
    if (v >= 1e12)
        snprintf(buf, n, "%.2fT", v / 1e12);
    else if (v >= 1e9)
        snprintf(buf, n, "%.2fB", v / 1e9);
    else
        snprintf(buf, n, "%.1fM", v / 1e6);
    return buf;
}

static void row_name(char *buf, size_t n, const zero_plan_row_t *r) {
    snprintf(buf, n, "stage %d, offload %s, ZeRO++ %s, checkpointing %s, micro-batch %d x %d",
             r->stage, zero__plan_offload_name((zero_plan_offload_t)r->offload),
             r->zeropp ? "on" : "off", r->checkpointing ? "on" : "off", r->micro, r->accum);
}

static void print_row(const zero_plan_row_t *r, int best) {
    printf("%c %d %-16s %-3s %-3s %5d %5d |", best ? '*' : ' ', r->stage,
           zero__plan_offload_name((zero_plan_offload_t)r->offload), r->zeropp ? "on" : "off",
           r->checkpointing ? "on" : "off", r->micro, r->accum);
    for (int k = 0; k < ZERO_PLAN_RAM_COUNT; k++) printf(" %9.3f", (double)r->ram[k] / GiB);
    printf(" %9.3f | %10.3f %9.3f | %9.3f %9.3f | %9.4g %-5s\n", (double)r->ram_rank / GiB,
           (double)r->ram_node / GiB, (double)(r->disk_optim + r->disk_params) / GiB,
           r->wire_intra / 1e9, r->wire_inter / 1e9, r->t_step,
           r->fits_ram && r->fits_disk ? "yes"
           : !r->fits_ram              ? "RAM"
                                       : "disk");
}

static int by_time(const void *a, const void *b) {
    const zero_plan_row_t *x = a, *y = b;
    int fx = x->fits_ram && x->fits_disk, fy = y->fits_ram && y->fits_disk;
    if (fx != fy) return fy - fx;
    if (fx) return x->t_step < y->t_step ? -1 : x->t_step > y->t_step;
    return x->ram_node < y->ram_node ? -1 : x->ram_node > y->ram_node;
}

static void print_text(const zero_train_config_t *cfg, const zero_plan_machine_t *m,
                       const zero_plan_calibration_t *cal, const char *cal_path,
                       const zero_plan_t *p, int all) {
    char a[32], b[32];
    const zero_gpt_config_t *g = &cfg->model;
    printf("model: GPT, %s parameters (%s active per token), %d layers, dim %d, %d heads, vocab "
           "%d, seq %d",
           fmt_count(a, sizeof a, p->params), fmt_count(b, sizeof b, p->active_params), g->layers,
           g->dim, g->heads, g->vocab, g->seq);
    if (g->moe.experts)
        printf(", MoE %d experts top-%d every %d", g->moe.experts, g->moe.top_k, g->moe.every);
    printf("; %s; global batch %d sequences (%d per rank)\n", zero_dtype_name(p->dtype),
           p->global_batch, p->global_batch / m->world);
    printf("machine: %d ranks, %d per node (%d node%s), %s; per node %.2f GiB RAM, %.2f GiB "
           "disk\n",
           m->world, m->ranks_per_node, m->world / m->ranks_per_node,
           m->world / m->ranks_per_node == 1 ? "" : "s",
           m->ranks_per_process == 1 ? "one process per rank" : "thread ranks of one process",
           (double)m->ram_bytes / GiB, (double)m->disk_bytes / GiB);
    printf("figures (%s%s%s): GEMM fp32 %.1f / bf16 %.1f GFLOP/s, memcpy %.1f GB/s, disk read "
           "%.2f / write %.2f GB/s (a node's, shared by its ranks), link %.2f GB/s\n",
           cal->measured ? cal_path : "defaults", cal->date[0] ? ", measured " : "", cal->date,
           cal->gemm_fp32_flops / 1e9, cal->gemm_bf16_flops / 1e9, cal->memory_bytes_per_s / 1e9,
           cal->disk_read_bytes_per_s / 1e9, cal->disk_write_bytes_per_s / 1e9,
           cal->inter_link_bytes_per_s / 1e9);
    printf("ZeRO paper's model states per rank (2-byte parameters and gradients, K = 12): stage "
           "0 %.2f, 1 %.2f, 2 %.2f, 3 %.2f GiB\n",
           zero__plan_paper_bytes(p->params, 12, m->world, 0) / GiB,
           zero__plan_paper_bytes(p->params, 12, m->world, 1) / GiB,
           zero__plan_paper_bytes(p->params, 12, m->world, 2) / GiB,
           zero__plan_paper_bytes(p->params, 12, m->world, 3) / GiB);
    zero_plan_row_t *rows = malloc((size_t)p->count * sizeof *rows);
    if (!rows) return;
    memcpy(rows, p->rows, (size_t)p->count * sizeof *rows);
    qsort(rows, (size_t)p->count, sizeof *rows, by_time);
    int fit = 0;
    for (int i = 0; i < p->count; i++) fit += rows[i].fits_ram && rows[i].fits_disk;
    const int shown = all   ? p->count
                      : fit ? (fit < 20 ? fit : 20)
                            : (p->count < 10 ? p->count : 10);
    printf("\n%d ways to run it, %d fit; %s%d shown (RAM and disk in GiB, wire in GB per rank "
           "per step)\n",
           p->count, fit,
           all   ? "all "
           : fit ? "the fastest "
                 : "none fits: the smallest ",
           shown);
    printf("  S offload          Z++ ckp micro accum |");
    for (int k = 0; k < ZERO_PLAN_RAM_COUNT; k++) {
        char h[16];
        snprintf(h, sizeof h, "%.9s", zero__plan_ram_name((zero_plan_ram_t)k));
        printf(" %9s", h);
    }
    printf(" %9s | %10s %9s | %9s %9s | %9s %-5s\n", "RSS/rank", "RAM/node", "disk/rank", "intra",
           "inter", "step s", "fits");
    for (int i = 0; i < shown; i++) print_row(&rows[i], i == 0 && fit);
    free(rows);
    char name[160];
    if (p->best >= 0) {
        const zero_plan_row_t *r = &p->rows[p->best];
        row_name(name, sizeof name, r);
        printf("\nfastest that fits: %s: %.4g s per step (compute %.4g, communication %.4g, "
               "optimizer %.4g, disk %.4g), %.4g tokens/s; %.2f GiB per rank, %.2f GiB RAM and "
               "%.2f GiB disk per node\n",
               name, r->t_step, r->t_compute, r->t_comm, r->t_optim, r->t_disk, r->tokens_per_s,
               (double)r->ram_rank / GiB, (double)r->ram_node / GiB, (double)r->disk_node / GiB);
    }
    printf("\ntime model:\n");
    for (int i = 0; zero__plan_assumptions[i]; i++) printf("  - %s\n", zero__plan_assumptions[i]);
}

static void add_row(cJSON *arr, const zero_plan_row_t *r) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNumberToObject(o, "stage", r->stage);
    cJSON_AddStringToObject(o, "offload", zero__plan_offload_name((zero_plan_offload_t)r->offload));
    cJSON_AddBoolToObject(o, "zeropp", r->zeropp);
    cJSON_AddBoolToObject(o, "activation_checkpointing", r->checkpointing);
    cJSON_AddNumberToObject(o, "micro_batch", r->micro);
    cJSON_AddNumberToObject(o, "gradient_accumulation_steps", r->accum);
    cJSON *ram = cJSON_AddObjectToObject(o, "ram_bytes_per_rank");
    for (int k = 0; ram && k < ZERO_PLAN_RAM_COUNT; k++)
        cJSON_AddNumberToObject(ram, zero__plan_ram_name((zero_plan_ram_t)k), (double)r->ram[k]);
    cJSON_AddNumberToObject(o, "peak_rss_bytes_per_rank", (double)r->ram_rank);
    cJSON_AddNumberToObject(o, "peak_rss_bytes_per_process", (double)r->ram_process);
    cJSON_AddNumberToObject(o, "ram_bytes_per_node", (double)r->ram_node);
    cJSON *disk = cJSON_AddObjectToObject(o, "disk_bytes_per_rank");
    if (disk) {
        cJSON_AddNumberToObject(disk, "optimizer_states", (double)r->disk_optim);
        cJSON_AddNumberToObject(disk, "parameters", (double)r->disk_params);
    }
    cJSON_AddNumberToObject(o, "disk_bytes_per_node", (double)r->disk_node);
    cJSON_AddNumberToObject(o, "paper_model_state_bytes", r->paper_bytes);
    cJSON_AddNumberToObject(o, "wire_intra_node_bytes_per_step", r->wire_intra);
    cJSON_AddNumberToObject(o, "wire_inter_node_bytes_per_step", r->wire_inter);
    cJSON *t = cJSON_AddObjectToObject(o, "seconds_per_step");
    if (t) {
        cJSON_AddNumberToObject(t, "compute", r->t_compute);
        cJSON_AddNumberToObject(t, "communication", r->t_comm);
        cJSON_AddNumberToObject(t, "optimizer", r->t_optim);
        cJSON_AddNumberToObject(t, "disk", r->t_disk);
        cJSON_AddNumberToObject(t, "step", r->t_step);
    }
    cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s);
    cJSON_AddBoolToObject(o, "fits_ram", r->fits_ram);
    cJSON_AddBoolToObject(o, "fits_disk", r->fits_disk);
}

static int print_json(const zero_train_config_t *cfg, const zero_plan_machine_t *m,
                      const zero_plan_calibration_t *cal, const zero_plan_t *p) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return 1;
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    if (model) {
        cJSON_AddNumberToObject(model, "params", p->params);
        cJSON_AddNumberToObject(model, "active_params", p->active_params);
        cJSON_AddNumberToObject(model, "layers", cfg->model.layers);
        cJSON_AddNumberToObject(model, "dim", cfg->model.dim);
        cJSON_AddNumberToObject(model, "heads", cfg->model.heads);
        cJSON_AddNumberToObject(model, "vocab", cfg->model.vocab);
        cJSON_AddNumberToObject(model, "seq", cfg->model.seq);
        cJSON_AddNumberToObject(model, "experts", cfg->model.moe.experts);
        cJSON_AddNumberToObject(model, "flops_per_token", p->flops_per_token);
        cJSON_AddStringToObject(model, "dtype", zero_dtype_name(p->dtype));
    }
    cJSON_AddNumberToObject(root, "global_batch", p->global_batch);
    cJSON *mach = cJSON_AddObjectToObject(root, "machine");
    if (mach) {
        cJSON_AddNumberToObject(mach, "world", m->world);
        cJSON_AddNumberToObject(mach, "ranks_per_node", m->ranks_per_node);
        cJSON_AddNumberToObject(mach, "ranks_per_process", m->ranks_per_process);
        cJSON_AddNumberToObject(mach, "ram_bytes_per_node", (double)m->ram_bytes);
        cJSON_AddNumberToObject(mach, "disk_bytes_per_node", (double)m->disk_bytes);
    }
    cJSON *c = cJSON_AddObjectToObject(root, "figures");
    if (c) {
        cJSON_AddBoolToObject(c, "measured", cal->measured);
        cJSON_AddStringToObject(c, "date", cal->date);
        cJSON_AddNumberToObject(c, "gemm_fp32_flops", cal->gemm_fp32_flops);
        cJSON_AddNumberToObject(c, "gemm_bf16_flops", cal->gemm_bf16_flops);
        cJSON_AddNumberToObject(c, "memory_bytes_per_s", cal->memory_bytes_per_s);
        cJSON_AddNumberToObject(c, "disk_read_bytes_per_s", cal->disk_read_bytes_per_s);
        cJSON_AddNumberToObject(c, "disk_write_bytes_per_s", cal->disk_write_bytes_per_s);
        cJSON_AddNumberToObject(c, "inter_link_bytes_per_s", cal->inter_link_bytes_per_s);
    }
    cJSON *as = cJSON_AddArrayToObject(root, "assumptions");
    for (int i = 0; as && zero__plan_assumptions[i]; i++)
        cJSON_AddItemToArray(as, cJSON_CreateString(zero__plan_assumptions[i]));
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; rows && i < p->count; i++) add_row(rows, &p->rows[i]);
    cJSON_AddNumberToObject(root, "best", p->best);
    cJSON_AddNumberToObject(root, "smallest", p->smallest);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return 1;
    puts(text);
    free(text);
    return 0;
}

static int calibrate(const char *path, const char *dir, int threads, double mib) {
    zero_plan_calibration_t cal;
    fprintf(stderr,
            "zero plan: timing this machine (%d threads: GEMM, memcpy, %.0f MiB of disk under "
            "%s)...\n",
            threads, mib, dir);
    zero_status_t st = zero__plan_calibrate(threads, dir, (size_t)(mib * 1048576.0), &cal);
    if (!st) st = zero__plan_calibration_save(path, &cal);
    if (st) {
        fprintf(stderr, "zero plan: %s\n", zero_last_error());
        return 1;
    }
    printf("wrote %s: GEMM fp32 %.1f / bf16 %.1f GFLOP/s, memcpy %.1f GB/s, disk read %.2f / "
           "write %.2f GB/s\n",
           path, cal.gemm_fp32_flops / 1e9, cal.gemm_bf16_flops / 1e9, cal.memory_bytes_per_s / 1e9,
           cal.disk_read_bytes_per_s / 1e9, cal.disk_write_bytes_per_s / 1e9);
    return 0;
}

int zero__cli_plan(int argc, char **argv) {
    zero_train_config_t cfg;
    zero__train_config_default(&cfg);
    zero__train_config_quiet(1);
    const char *config = NULL, *cal_file = NULL, *cal_dir = ".", *backend = NULL, *v;
    double params = 0, cal_mib = 1024, world = 0, per_node = 0, ram = 0, disk = 0, link = 0,
           threads = 0;
    int json = 0, all = 0, do_cal = 0;
    /* first pass: the config file (flags apply over it, in order) */
    for (int i = 1; i < argc; i++)
        if ((v = zero__cli_arg_value(argc, argv, &i, "--config"))) config = v;
    if (config && zero__train_config_load(&cfg, config)) {
        fprintf(stderr, "zero plan: %s\n", zero_last_error());
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        size_t k;
        for (k = 0; k < ZERO_ARRAY_LEN(key_flags); k++)
            if ((v = zero__cli_arg_value(argc, argv, &i, key_flags[k].flag))) break;
        if (k < ZERO_ARRAY_LEN(key_flags)) {
            if (zero__train_config_set(&cfg, key_flags[k].key, v)) {
                fprintf(stderr, "zero plan: %s: %s\n", key_flags[k].flag, zero_last_error());
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--config"))) {
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--all")) {
            all = 1;
        } else if (!strcmp(a, "--calibrate")) {
            do_cal = 1;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--calibration"))) {
            cal_file = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--calibrate-dir"))) {
            cal_dir = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--backend"))) {
            backend = v;
            if (strcmp(v, "threads") && strcmp(v, "mpi")) {
                fprintf(stderr, "zero plan: --backend '%s' is invalid (expected threads or mpi)\n",
                        v);
                return 2;
            }
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--dtype"))) {
            if (zero__train_config_set_dtype(&cfg, v)) {
                fprintf(stderr, "zero plan: %s\n", zero_last_error());
                return 2;
            }
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--set"))) {
            const char *eq = strchr(v, '=');
            char key[128];
            if (!eq || (size_t)(eq - v) >= sizeof key) {
                fprintf(stderr, "zero plan: --set '%s' is invalid (expected KEY=VALUE)\n", v);
                return 2;
            }
            snprintf(key, sizeof key, "%.*s", (int)(eq - v), v);
            if (zero__train_config_set(&cfg, key, eq + 1)) {
                fprintf(stderr, "zero plan: %s\n", zero_last_error());
                return 2;
            }
        } else {
            const struct {
                const char *flag;
                double *out;
            } nums[] = {{"--params", &params},
                        {"--world", &world},
                        {"--ranks-per-node", &per_node},
                        {"--ram", &ram},
                        {"--disk", &disk},
                        {"--link", &link},
                        {"--threads", &threads},
                        {"--calibrate-disk", &cal_mib}};
            size_t n;
            for (n = 0; n < ZERO_ARRAY_LEN(nums); n++)
                if ((v = zero__cli_arg_value(argc, argv, &i, nums[n].flag))) break;
            if (n == ZERO_ARRAY_LEN(nums)) {
                fprintf(stderr, "zero plan: unknown option '%s' (try `zero plan --help`)\n", a);
                return 2;
            }
            if (!parse_pos(nums[n].flag, v, nums[n].out)) return 2;
            if (nums[n].out != &params && nums[n].out != &ram && nums[n].out != &disk &&
                nums[n].out != &link && nums[n].out != &cal_mib &&
                (*nums[n].out != floor(*nums[n].out) || *nums[n].out > 1 << 24)) {
                fprintf(stderr, "zero plan: %s %s is invalid (expected a whole number up to %d)\n",
                        nums[n].flag, v, 1 << 24);
                return 2;
            }
        }
    }
    char path[1024];
    if (!cal_file) cal_file = zero__plan_calibration_path(path, sizeof path);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (do_cal)
        return calibrate(cal_file, cal_dir, threads > 0 ? (int)threads : (int)cores, cal_mib);

    const int shaped = zero__train_config_is_set(&cfg, "model.layers") ||
                       zero__train_config_is_set(&cfg, "model.dim");
    if (params > 0 && shaped)
        fprintf(stderr,
                "warning: --params %.3g ignored: the model's layers or dim are given "
                "(drop them to plan a GPT-3-shaped model of that size)\n",
                params);
    if (params > 0 && !shaped) {
        shape_from_params(&cfg, params);
        if (!json)
            printf("model: --params %.3g taken as %d layers of dim %d with %d heads (GPT-3's "
                   "shape: dim = 128 x layers)\n",
                   params, cfg.model.layers, cfg.model.dim, cfg.model.heads);
    }
    zero_plan_calibration_t cal;
    zero_status_t st = zero__plan_calibration_load(cal_file, &cal);
    if (st == ZERO_ERR_IO) {
        fprintf(stderr,
                "warning: no calibration file at %s: the step times use the default figures of "
                "docs/plan.md; run `zero plan --calibrate` to measure this machine\n",
                cal_file);
        zero__plan_calibration_default(&cal);
    } else if (st) {
        fprintf(stderr, "zero plan: %s\n", zero_last_error());
        return 1;
    }
    if (link > 0) cal.inter_link_bytes_per_s = link * 1e9;

    zero_plan_machine_t m;
    memset(&m, 0, sizeof m);
    m.world = world > 0 ? (int)world : cfg.ranks > 0 ? cfg.ranks : 1;
    m.ranks_per_node = per_node > 0 ? (int)per_node : m.world;
    const int one_node = m.ranks_per_node >= m.world;
    m.ranks_per_process = backend    ? (!strcmp(backend, "mpi") ? 1 : m.world)
                          : one_node ? m.world
                                     : 1;
    m.ram_bytes = ram > 0 ? (uint64_t)(ram * GiB) : zero__mem_available();
    m.disk_bytes = disk > 0 ? (uint64_t)(disk * GiB) : zero__disk_free(cfg.nvme_path);
    const int rpn = m.ranks_per_node > 0 ? m.ranks_per_node : 1;
    m.threads = threads > 0       ? (int)threads
                : cfg.threads > 0 ? cfg.threads
                : cores / rpn > 1 ? (int)(cores / rpn)
                                  : 1;
    if (m.ranks_per_process > 1 && !one_node) {
        fprintf(stderr, "zero plan: --backend threads runs every rank in one process, on one "
                        "node: set --ranks-per-node to --world, or use --backend mpi\n");
        return 2;
    }
    zero_plan_t plan;
    st = zero__plan_run(&cfg, &m, &cal, &plan);
    if (st) {
        fprintf(stderr, "zero plan: %s\n", zero_last_error());
        return 1;
    }
    int rc = json ? print_json(&cfg, &m, &cal, &plan) : 0;
    if (!json) print_text(&cfg, &m, &cal, cal.measured ? cal_file : NULL, &plan, all);
    if (plan.best < 0) {
        const zero_plan_row_t *r = &plan.rows[plan.smallest];
        char name[160];
        row_name(name, sizeof name, r);
        fprintf(stderr,
                "zero plan: no way to run this model fits: the smallest (%s) needs %.2f GiB of "
                "RAM per node (%d rank%s) and %.2f GiB of disk against --ram %.2f and --disk "
                "%.2f GiB; add ranks (--world), RAM or disk per node, or plan a smaller model\n",
                name, (double)r->ram_node / GiB,
                m.ranks_per_node > m.world ? m.world : m.ranks_per_node,
                m.ranks_per_node == 1 ? "" : "s", (double)r->disk_node / GiB,
                (double)m.ram_bytes / GiB, (double)m.disk_bytes / GiB);
        rc = 1;
    }
    zero__plan_free(&plan);
    return rc;
}
