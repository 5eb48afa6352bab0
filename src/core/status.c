/* status.c — status names, the thread-local error message and logging. */
#include "core_internal.h"

#include <assert.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static const char *const status_names[] = {
    "ok",         "invalid argument",    "out of memory",  "timeout",
    "mismatch",   "unsupported",         "I/O error",      "bad file format",
    "bad config", "communicator failed", "internal error",
};
static_assert(ZERO_ARRAY_LEN(status_names) == ZERO_STATUS_COUNT, "status name table");

const char *zero_status_str(zero_status_t status) {
    int i = -(int)status;
    return (i >= 0 && i < ZERO_STATUS_COUNT) ? status_names[i] : "unknown status";
}

static _Thread_local char last_error[1024];

const char *zero_last_error(void) { return last_error; }

void zero__set_error_message(const char *message) {
    snprintf(last_error, sizeof last_error, "%s", message ? message : "");
}

zero_status_t zero__error(zero_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

/* ------------------------------------------------------------------------------ logging */

static const char *const level_names[] = {"debug", "info", "warning", "error"};
static_assert(ZERO_ARRAY_LEN(level_names) == ZERO_LOG_LEVEL_COUNT, "log level table");

static zero_log_fn log_fn;
static void *log_user;
static zero_log_level_t log_min_level = ZERO_LOG_INFO;

void zero_log_set_callback(zero_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void zero_log_set_level(zero_log_level_t min_level) { log_min_level = min_level; }

void zero__log(zero_log_level_t level, int rank, int world, const char *fmt, ...) {
    if (level < log_min_level) return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (log_fn) {
        log_fn(level, rank, world, message, log_user);
    } else if (rank >= 0) {
        fprintf(stderr, "[rank %d/%d] %s: %s\n", rank, world, level_names[level], message);
    } else {
        fprintf(stderr, "zero: %s: %s\n", level_names[level], message);
    }
}

double zero_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
