/* monitor.c — TensorBoard event files and CSV monitor files (monitor.h).
 *
 * An event file is a sequence of records: the data's length (uint64, little-endian), the masked
 * CRC32C of those 8 bytes, the data, the masked CRC32C of the data; each record's data is one
 * `Event` protocol buffer (tensorflow/core/util/event.proto). The few fields written are encoded
 * here by hand: wall_time (1, double), step (2, varint), file_version (3, string, the first
 * record's "brain.Event:2"), summary (5: repeated Value {tag 1, simple_value 2 (float)}) and
 * session_log (7: {status 1 = START}). One record per step carries all its scalars.
 */
#include "train/monitor.h"

#include "core/core_internal.h"
#include "core/crc32c.h"
#include "core/fileio.h"
#include "train/outputs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SCALAR_COUNT = 7 };

/* The scalars, in zero_monitor_point_t's order after `samples`. */
static const char *const scalar_tags[SCALAR_COUNT] = {
    "Train/Samples/train_loss", "Train/Samples/lr",           "Train/Samples/loss_scale",
    "Train/Samples/grad_norm",  "Train/Samples/tokens_per_s", "Train/Samples/mfu",
    "Train/Samples/val_loss"};

struct zero_monitor {
    FILE *events; /* NULL: no tensorboard */
    char events_path[ZERO_CONFIG_STR_MAX * 2 + 256];
    FILE *csv[SCALAR_COUNT]; /* opened at the first value of each (NULL: none yet or no csv) */
    char csv_dir[ZERO_CONFIG_STR_MAX * 2 + 2];
    int csv_enabled;
    int64_t resume_samples;
};

static void log_dir(const char *output_path, const char *job_name, char *out, size_t n) {
    snprintf(out, n, "%s%s%s", output_path, output_path[0] ? "/" : "", job_name);
}

static zero_status_t check_dir(const char *key, const char *output_path, const char *job_name) {
    char dir[ZERO_CONFIG_STR_MAX * 2 + 2];
    log_dir(output_path, job_name, dir, sizeof dir);
    zero_status_t st = zero__mkdir_p(dir);
    if (!st) st = zero__dir_writable(dir);
    if (!st) return ZERO_OK;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", zero_last_error());
    return zero__error(st, "%s: output_path \"%s\", job_name \"%s\": %s", key, output_path,
                       job_name, msg);
}

zero_status_t zero__monitor_check(const zero_train_config_t *cfg) {
    zero_status_t st = ZERO_OK;
    if (cfg->tb_enabled) st = check_dir("tensorboard", cfg->tb_output_path, cfg->tb_job_name);
    if (!st && cfg->csv_enabled)
        st = check_dir("csv_monitor", cfg->csv_output_path, cfg->csv_job_name);
    return st;
}

/* ------------------------------------------------------------------ protocol buffer pieces */

typedef struct {
    uint8_t b[1024];
    size_t n;
} buf_t;

static void put_byte(buf_t *b, uint8_t v) {
    if (b->n < sizeof b->b) b->b[b->n] = v;
    b->n++;
}
static void put_varint(buf_t *b, uint64_t v) {
    for (; v >= 0x80; v >>= 7) put_byte(b, (uint8_t)(v | 0x80));
    put_byte(b, (uint8_t)v);
}
static void put_fixed(buf_t *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) put_byte(b, (uint8_t)(v >> (8 * i)));
}
static void put_bytes(buf_t *b, int field, const void *data, size_t n) {
    put_varint(b, (uint64_t)field << 3 | 2);
    put_varint(b, n);
    for (size_t i = 0; i < n; i++) put_byte(b, ((const uint8_t *)data)[i]);
}
static void put_double(buf_t *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_varint(b, (uint64_t)field << 3 | 1);
    put_fixed(b, u, 8);
}

/* An Event with wall_time and step; the caller appends its payload field. */
static void event_head(buf_t *e, int64_t step) {
    e->n = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    put_double(e, 1, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
    put_varint(e, 2 << 3);
    put_varint(e, (uint64_t)step);
}

static uint32_t masked_crc(const void *data, size_t n) {
    const uint32_t c = zero__crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static zero_status_t write_record(zero_monitor_t *m, const buf_t *e) {
    if (e->n > sizeof e->b)
        return zero__error(ZERO_ERR_INTERNAL, "tensorboard: an event of %zu bytes (at most %zu)",
                           e->n, sizeof e->b);
    uint8_t head[12];
    uint64_t len = e->n;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    const uint32_t hc = masked_crc(head, 8), dc = masked_crc(e->b, e->n);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(hc >> (8 * i));
    uint8_t tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(dc >> (8 * i));
    fwrite(head, 1, sizeof head, m->events);
    fwrite(e->b, 1, e->n, m->events);
    fwrite(tail, 1, sizeof tail, m->events);
    return zero__train_log_flush("TensorBoard event file", m->events, m->events_path, 0);
}

static zero_status_t open_events(zero_monitor_t *m, const zero_train_config_t *cfg) {
    char dir[ZERO_CONFIG_STR_MAX * 2 + 2], host[64] = "localhost";
    log_dir(cfg->tb_output_path, cfg->tb_job_name, dir, sizeof dir);
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    /* TensorBoard reads every file whose name holds "tfevents"; this is the name its writers
     * give (time, host, process) */
    snprintf(m->events_path, sizeof m->events_path, "%s/events.out.tfevents.%lld.%s.%d.0", dir,
             (long long)time(NULL), host, (int)getpid());
    m->events = fopen(m->events_path, "wbx");
    if (!m->events)
        return zero__error(ZERO_ERR_IO, "tensorboard: cannot create '%s': %s", m->events_path,
                           strerror(errno));
    buf_t e;
    event_head(&e, 0);
    put_bytes(&e, 3, "brain.Event:2", strlen("brain.Event:2"));
    zero_status_t st = write_record(m, &e);
    if (!st && m->resume_samples > 0) {
        /* SessionLog{status: START}: TensorBoard drops the points of earlier files from its step
         * on, so it is the first step after the checkpoint's */
        event_head(&e, m->resume_samples + 1);
        const uint8_t start[] = {0x08, 0x01};
        put_bytes(&e, 7, start, sizeof start);
        st = write_record(m, &e);
    }
    return st;
}

static zero_status_t write_events(zero_monitor_t *m, const zero_monitor_point_t *p,
                                  const double *v) {
    buf_t e, summary = {.n = 0};
    for (int i = 0; i < SCALAR_COUNT; i++) {
        if (isnan(v[i])) continue;
        buf_t value = {.n = 0};
        put_bytes(&value, 1, scalar_tags[i], strlen(scalar_tags[i]));
        float f = (float)v[i];
        uint32_t u;
        memcpy(&u, &f, 4);
        put_varint(&value, 2 << 3 | 5);
        put_fixed(&value, u, 4);
        put_bytes(&summary, 1, value.b, value.n);
    }
    event_head(&e, p->samples);
    put_bytes(&e, 5, summary.b, summary.n);
    return write_record(m, &e);
}

/* ------------------------------------------------------------------------------ CSV files */

/* "N,value\n" -> N; the "step,name" header -> 0 (kept); anything else -> -1. */
static long long csv_line_step(const char *line, ssize_t len) {
    if (len < 2 || line[len - 1] != '\n') return -1;
    if (!strncmp(line, "step,", 5)) return 0;
    char *end;
    long long s = strtoll(line, &end, 10);
    return end != line && *end == ',' && s >= 0 ? s : -1;
}

/* Scalar i's CSV file, named as DeepSpeed names it: the tag with '/' turned into '_'. */
static void csv_path(const zero_monitor_t *m, int i, char *path, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "%s", scalar_tags[i]);
    for (char *c = name; *c; c++)
        if (*c == '/') *c = '_';
    snprintf(path, n, "%s/%s.csv", m->csv_dir, name);
}

static zero_status_t write_csv(zero_monitor_t *m, const zero_monitor_point_t *p, const double *v) {
    for (int i = 0; i < SCALAR_COUNT; i++) {
        if (isnan(v[i])) continue;
        char path[sizeof m->csv_dir + 96];
        csv_path(m, i, path, sizeof path);
        if (!m->csv[i]) {
            zero_status_t st = zero__train_log_open("CSV monitor file", path, m->resume_samples,
                                                    csv_line_step, &m->csv[i]);
            if (st) return st;
            if (ftello(m->csv[i]) == 0) /* DeepSpeed's header: step and the tag's last part */
                fprintf(m->csv[i], "step,%s\n", strrchr(scalar_tags[i], '/') + 1);
        }
        fprintf(m->csv[i], "%lld,%.9g\n", (long long)p->samples, v[i]);
        zero_status_t st = zero__train_log_flush("CSV monitor file", m->csv[i], path, 0);
        if (st) return st;
    }
    return ZERO_OK;
}

/* ---------------------------------------------------------------------------------- API */

zero_status_t zero__monitor_open(const zero_train_config_t *cfg, int64_t resume_samples,
                                 zero_monitor_t **out) {
    *out = NULL;
    if (!cfg->tb_enabled && !cfg->csv_enabled) return ZERO_OK;
    zero_monitor_t *m = calloc(1, sizeof *m);
    if (!m) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "monitor: out of memory");
    m->resume_samples = resume_samples;
    m->csv_enabled = cfg->csv_enabled;
    log_dir(cfg->csv_output_path, cfg->csv_job_name, m->csv_dir, sizeof m->csv_dir);
    zero_status_t st = cfg->tb_enabled ? open_events(m, cfg) : ZERO_OK;
    if (st) {
        zero__monitor_close(m);
        return st;
    }
    *out = m;
    return ZERO_OK;
}

zero_status_t zero__monitor_write(zero_monitor_t *m, const zero_monitor_point_t *p) {
    if (!m) return ZERO_OK;
    const double v[SCALAR_COUNT] = {p->train_loss,   p->lr,  p->loss_scale, p->grad_norm,
                                    p->tokens_per_s, p->mfu, p->val_loss};
    zero_status_t st = m->events ? write_events(m, p, v) : ZERO_OK;
    if (!st && m->csv_enabled) st = write_csv(m, p, v);
    return st;
}

zero_status_t zero__monitor_close(zero_monitor_t *m) {
    if (!m) return ZERO_OK;
    zero_status_t st = ZERO_OK;
    if (m->events)
        st = zero__train_log_flush("TensorBoard event file", m->events, m->events_path, 1);
    for (int i = 0; i < SCALAR_COUNT; i++)
        if (m->csv[i]) {
            char path[sizeof m->csv_dir + 96];
            csv_path(m, i, path, sizeof path);
            zero_status_t c = zero__train_log_flush("CSV monitor file", m->csv[i], path, 1);
            if (!st) st = c;
        }
    free(m);
    return st;
}
