/* calibration.c — the machine figures of `zero plan`'s time model: measured on this machine
 * (`zero plan --calibrate`), kept in a small JSON file, or the documented defaults.
 *
 * Measurements: the GEMM rate is the kernels' own peak measurement (the MFU denominator) for
 * fp32 and the best of a few bf16 linear forwards of a transformer's shape; memory is the best
 * of a few 256 MiB memcpy calls (bytes copied per second); disk is one O_DIRECT sequential write
 * (with fdatasync) and read of a file unlinked as soon as it is made, in 4 MiB blocks (the
 * buffered path where the file system refuses O_DIRECT, e.g. tmpfs, said in the warning). Best
 * of, not mean of: the machine may be shared, and noise only slows a run down.
 *
 * Not here: the link between nodes, which one machine cannot measure (--link, or the default).
 */
#include "plan/plan.h"

#include "core/core_internal.h"
#include "core/fileio.h"
#include "kernels/kernels.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void zero__plan_calibration_default(zero_plan_calibration_t *cal) {
    memset(cal, 0, sizeof *cal);
    /* docs/plan.md: 2 cores of the project's standard machine (MACHINE.md's medians, rounded
     * down), and InfiniBand EDR's 12.5 GB/s between nodes (the ZeRO paper's cluster). */
    cal->gemm_fp32_flops = 200e9;
    cal->gemm_bf16_flops = 400e9;
    cal->memory_bytes_per_s = 20e9;
    cal->disk_read_bytes_per_s = 2e9;
    cal->disk_write_bytes_per_s = 2e9;
    cal->inter_link_bytes_per_s = 12.5e9;
    cal->threads = 2;
}

const char *zero__plan_calibration_path(char *buf, size_t n) {
    const char *env = getenv("ZERO_CALIBRATION"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/zero/calibration.json", xdg);
    else
        snprintf(buf, n, "%s/.cache/zero/calibration.json", home && *home ? home : ".");
    return buf;
}

static const struct {
    const char *key;
    size_t offset;
} figures[] = {
    {"gemm_fp32_flops", offsetof(zero_plan_calibration_t, gemm_fp32_flops)},
    {"gemm_bf16_flops", offsetof(zero_plan_calibration_t, gemm_bf16_flops)},
    {"memory_bytes_per_s", offsetof(zero_plan_calibration_t, memory_bytes_per_s)},
    {"disk_read_bytes_per_s", offsetof(zero_plan_calibration_t, disk_read_bytes_per_s)},
    {"disk_write_bytes_per_s", offsetof(zero_plan_calibration_t, disk_write_bytes_per_s)},
    {"inter_link_bytes_per_s", offsetof(zero_plan_calibration_t, inter_link_bytes_per_s)},
};

zero_status_t zero__plan_calibration_load(const char *path, zero_plan_calibration_t *cal) {
    if (access(path, F_OK) != 0) return zero__error(ZERO_ERR_IO, "no calibration file at %s", path);
    char *text = NULL;
    zero_status_t st = zero__read_file(path, 1 << 20, &text, NULL);
    if (st) return st == ZERO_ERR_IO ? ZERO_ERR_CONFIG : st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zero__error(ZERO_ERR_CONFIG,
                           "%s: not a JSON object (expected the file `zero plan --calibrate` "
                           "writes; run it again)",
                           path);
    }
    zero__plan_calibration_default(cal);
    for (size_t i = 0; i < ZERO_ARRAY_LEN(figures); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, figures[i].key);
        if (!v) continue; /* a figure left out keeps its default */
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0)) {
            cJSON_Delete(root);
            return zero__error(ZERO_ERR_CONFIG,
                               "%s: %s is not a positive number (expected a rate measured by "
                               "`zero plan --calibrate`)",
                               path, figures[i].key);
        }
        *(double *)((char *)cal + figures[i].offset) = v->valuedouble;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "threads");
    if (cJSON_IsNumber(t) && t->valueint > 0) cal->threads = t->valueint;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "date");
    if (cJSON_IsString(d)) snprintf(cal->date, sizeof cal->date, "%s", d->valuestring);
    cal->measured = 1;
    cJSON_Delete(root);
    return ZERO_OK;
}

zero_status_t zero__plan_calibration_save(const char *path, const zero_plan_calibration_t *cal) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "calibration: out of memory");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "date", cal->date);
    cJSON_AddNumberToObject(root, "threads", cal->threads);
    for (size_t i = 0; i < ZERO_ARRAY_LEN(figures); i++)
        cJSON_AddNumberToObject(root, figures[i].key,
                                *(const double *)((const char *)cal + figures[i].offset));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "calibration: out of memory");
    char dir[1024];
    zero__dir_of(path, dir, sizeof dir);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    zero_status_t st = zero__mkdir_p(dir);
    size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print's terminator becomes the file's last newline */
    if (!st) st = zero__write_file_atomic(dir, name, text, len + 1);
    free(text);
    return st;
}

/* One sequential write (+ fdatasync) and read of `bytes` in 4 MiB blocks under dir. */
static zero_status_t disk_rates(const char *dir, size_t bytes, double *rd, double *wr) {
    const size_t block = (size_t)4 << 20;
    bytes = bytes / block * block;
    if (!bytes) bytes = block;
    char path[1100];
    snprintf(path, sizeof path, "%s/zero-calibrate-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return zero__error(ZERO_ERR_IO,
                           "cannot create a test file in %s: %s (expected a writable directory: "
                           "--calibrate-dir DIR)",
                           dir, strerror(errno));
    unlink(path); /* nothing left behind, whatever happens next */
    int direct = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT) == 0;
    if (!direct)
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "calibration: %s refuses O_DIRECT; the disk figures are the page cache's", dir);
    void *buf = zero_mem_alloc(NULL, ZERO_MEM_OTHER, block, 4096);
    zero_status_t st =
        buf ? ZERO_OK : zero__error(ZERO_ERR_OUT_OF_MEMORY, "calibration: no memory");
    if (buf) memset(buf, 0x5a, block);
    double t0 = zero_time_now();
    for (size_t off = 0; !st && off < bytes; off += block)
        st = zero__pwrite_all(fd, buf, block, (int64_t)off, dir);
    if (!st && fdatasync(fd) != 0)
        st = zero__error(ZERO_ERR_IO, "fdatasync in %s: %s", dir, strerror(errno));
    double t1 = zero_time_now();
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    for (size_t off = 0; !st && off < bytes; off += block)
        st = zero__pread_all(fd, buf, block, (int64_t)off, dir);
    double t2 = zero_time_now();
    zero_mem_free(buf);
    close(fd);
    if (st) return st;
    *wr = (double)bytes / (t1 - t0);
    *rd = (double)bytes / (t2 - t1);
    return ZERO_OK;
}

zero_status_t zero__plan_calibrate(int threads, const char *dir, size_t disk_bytes,
                                   zero_plan_calibration_t *cal) {
    zero__plan_calibration_default(cal);
    cal->threads = threads < 1 ? 1 : threads;
    cal->gemm_fp32_flops = zero__matmul_peak_flops(ZERO_DTYPE_FP32, cal->threads);
    cal->gemm_bf16_flops = zero__matmul_peak_flops(ZERO_DTYPE_BF16, cal->threads);
    cal->memory_bytes_per_s = zero__memcpy_rate((size_t)256 << 20, 4, 1);
    if (!(cal->gemm_fp32_flops > 0) || !(cal->memory_bytes_per_s > 0))
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "calibration: no memory for the GEMM or memcpy buffers (about 600 MiB)");
    if (!(cal->gemm_bf16_flops > 0)) cal->gemm_bf16_flops = cal->gemm_fp32_flops;
    zero_status_t st =
        disk_rates(dir, disk_bytes, &cal->disk_read_bytes_per_s, &cal->disk_write_bytes_per_s);
    if (st) return st;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(cal->date, sizeof cal->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cal->measured = 1;
    return ZERO_OK;
}
