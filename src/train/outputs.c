/* outputs.c — checks of a run's output paths before step 1, and the metrics log's opening (with
 * the truncation a resume needs) and write-error reporting.
 *
 * Why probes rather than access(2): root ignores permission bits, so only creating a file tells
 * a read-only mount or an immutable directory from a writable one (zero__dir_writable). Nothing
 * here truncates or replaces an existing file before the run is known to start: the metrics log
 * is truncated by zero__train_metrics_open, after the resume point is known.
 */
#include "train/outputs.h"

#include "core/core_internal.h"
#include "core/fileio.h"
#include "train/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A file the run will create or replace: its directory must exist and take new files. */
static zero_status_t check_new_file(const char *what, const char *path) {
    char dir[4096];
    struct stat sb;
    if (!path[0] || path[strlen(path) - 1] == '/' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return zero__error(ZERO_ERR_IO, "%s '%s' is a directory (expected a file name)", what,
                           path);
    zero__dir_of(path, dir, sizeof dir);
    if (stat(dir, &sb) != 0)
        return zero__error(ZERO_ERR_IO,
                           "%s '%s': directory %s: %s (expected an existing directory)", what, path,
                           dir, strerror(errno));
    zero_status_t st = zero__dir_writable(dir);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        return zero__error(st, "%s '%s': %s", what, path, msg);
    }
    return ZERO_OK;
}

/* The metrics log: an existing file must open for writing (not truncated here); a new one needs
 * a writable directory. */
static zero_status_t check_metrics(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) return check_new_file("metrics log", path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
        return zero__error(ZERO_ERR_IO, "cannot write the metrics log '%s': %s", path,
                           strerror(errno));
    close(fd);
    /* A resume truncates it in place; a regular file's directory need not be writable. */
    return ZERO_OK;
}

zero_status_t zero__train_outputs_check(const zero_train_config_t *cfg, const char *report_path,
                                        const char *metrics_path, int rank) {
    zero_status_t st = ZERO_OK;
    if (rank == 0 && report_path) st = check_new_file("JSON report", report_path);
    if (!st && rank == 0 && metrics_path) st = check_metrics(metrics_path);
    if (!st && cfg->save_dir[0]) {
        st = zero__mkdir_p(cfg->save_dir);
        if (!st) st = zero__dir_writable(cfg->save_dir);
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", zero_last_error());
            st = zero__error(st, "train.save_dir = \"%s\": %s", cfg->save_dir, msg);
        }
    }
    if (!st && rank == 0) st = zero__train_ckpt_check_dir(cfg);
    return st;
}

/* The step of a complete metrics record ("{"step": N, ...}\n"), or -1. */
static long long record_step(const char *line, ssize_t len) {
    long long step = -1;
    if (len < 3 || line[len - 1] != '\n' || line[len - 2] != '}') return -1;
    if (sscanf(line, "{\"step\": %lld", &step) != 1) return -1;
    return step;
}

zero_status_t zero__train_log_open(const char *what, const char *path, int64_t keep_through_step,
                                   zero_line_step_fn line_step, FILE **out) {
    *out = NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666); /* e.g. /dev/full */
    if (fd < 0)
        return zero__error(ZERO_ERR_IO, "cannot write the %s '%s': %s", what, path,
                           strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        *out = fdopen(fd, "w");
        if (!*out) {
            close(fd);
            return zero__error(ZERO_ERR_IO, "cannot write the %s '%s': %s", what, path,
                               strerror(errno));
        }
        return ZERO_OK;
    }
    FILE *f = fdopen(fd, "r+");
    if (!f) {
        close(fd);
        return zero__error(ZERO_ERR_IO, "cannot open the %s '%s': %s", what, path, strerror(errno));
    }
    /* Keep the records up to the resume point: the first one past it, or an incomplete one,
     * ends what is kept. */
    off_t keep = 0;
    if (keep_through_step > 0) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, f)) > 0) {
            long long s = line_step(line, len);
            if (s < 0 || s > keep_through_step) break;
            keep += len;
        }
        free(line);
    }
    zero_status_t st = ZERO_OK;
    if (ftruncate(fd, keep) != 0 || fseeko(f, keep, SEEK_SET) != 0)
        st = zero__error(ZERO_ERR_IO, "cannot truncate the %s '%s' to %lld bytes: %s", what, path,
                         (long long)keep, strerror(errno));
    if (st) {
        fclose(f);
        return st;
    }
    *out = f;
    return ZERO_OK;
}

zero_status_t zero__train_metrics_open(const char *path, int64_t keep_through_step, FILE **out) {
    return zero__train_log_open("metrics log", path, keep_through_step, record_step, out);
}

zero_status_t zero__train_log_flush(const char *what, FILE *f, const char *path, int close) {
    int err = 0;
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) err = errno ? errno : EIO;
    if (close) {
        errno = 0;
        if (fclose(f) != 0 && !err) err = errno ? errno : EIO;
    }
    if (err)
        return zero__error(ZERO_ERR_IO, "cannot write the %s '%s': %s", what, path, strerror(err));
    return ZERO_OK;
}

zero_status_t zero__train_metrics_flush(FILE *f, const char *path, int close) {
    return zero__train_log_flush("metrics log", f, path, close);
}
