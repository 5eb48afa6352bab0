/* fileio.c — careful file I/O for checkpoints and reports: full reads and writes that retry on
 * EINTR and short counts, fsync of files and directories, mkdir -p, atomic small-file replacement.
 *
 * Every failure sets a message naming the path, the operation and strerror(errno). Nothing here
 * prints or exits. rmtree is best effort and only used on directories this module created.
 */
#include "core/fileio.h"
#include "core/core_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

zero_status_t zero__write_all(int fd, const void *buf, size_t bytes, const char *path) {
    const char *p = buf;
    while (bytes) {
        ssize_t n = write(fd, p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return zero__error(ZERO_ERR_IO, "cannot write %zu bytes to %s: %s", bytes, path,
                               n < 0 ? strerror(errno) : "no space written");
        p += n;
        bytes -= (size_t)n;
    }
    return ZERO_OK;
}

zero_status_t zero__pwrite_all(int fd, const void *buf, size_t bytes, int64_t offset,
                               const char *path) {
    const char *p = buf;
    while (bytes) {
        ssize_t n = pwrite(fd, p, bytes, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return zero__error(ZERO_ERR_IO, "cannot write %zu bytes at offset %lld of %s: %s",
                               bytes, (long long)offset, path,
                               n < 0 ? strerror(errno) : "no space written");
        p += n;
        bytes -= (size_t)n;
        offset += n;
    }
    return ZERO_OK;
}

zero_status_t zero__pread_all(int fd, void *buf, size_t bytes, int64_t offset, const char *path) {
    char *p = buf;
    while (bytes) {
        ssize_t n = pread(fd, p, bytes, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return zero__error(ZERO_ERR_IO, "cannot read %zu bytes at offset %lld of %s: %s", bytes,
                               (long long)offset, path, strerror(errno));
        if (n == 0)
            return zero__error(ZERO_ERR_FORMAT,
                               "%s is truncated: expected %zu more bytes at offset %lld, found "
                               "end of file",
                               path, bytes, (long long)offset);
        p += n;
        bytes -= (size_t)n;
        offset += n;
    }
    return ZERO_OK;
}

zero_status_t zero__fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zero__error(ZERO_ERR_IO, "cannot open %s to fsync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return zero__error(ZERO_ERR_IO, "fsync of %s failed: %s", path, strerror(err));
    return ZERO_OK;
}

zero_status_t zero__mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return zero__error(ZERO_ERR_INVALID_ARG, "directory path '%s' is empty or too long", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return zero__error(ZERO_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return zero__error(ZERO_ERR_IO, "%s is not a directory", path);
    return ZERO_OK;
}

void zero__dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, n, ".");
    else if (slash == path)
        snprintf(dir, n, "/");
    else
        snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

zero_status_t zero__dir_writable(const char *path) {
    static _Atomic unsigned counter;
    char probe[4096 + 64];
    struct stat sb;
    if (stat(path, &sb) != 0)
        return zero__error(ZERO_ERR_IO, "directory %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return zero__error(ZERO_ERR_IO, "%s is not a directory", path);
    snprintf(probe, sizeof probe, "%s/.zero-write-probe-%ld-%u", path, (long)getpid(), counter++);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return zero__error(ZERO_ERR_IO, "cannot write in directory %s: %s", path, strerror(errno));
    close(fd);
    unlink(probe);
    return ZERO_OK;
}

void zero__rmtree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[4096];
            if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) continue;
            struct stat st;
            if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
                zero__rmtree(sub);
            else
                unlink(sub);
        }
        closedir(d);
    }
    rmdir(path);
}

zero_status_t zero__write_file_atomic(const char *dir, const char *name, const void *data,
                                      size_t bytes) {
    char path[4096], tmp[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path ||
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= (int)sizeof tmp)
        return zero__error(ZERO_ERR_INVALID_ARG, "path %s/%s is too long", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return zero__error(ZERO_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    zero_status_t st = zero__write_all(fd, data, bytes, tmp);
    if (st == ZERO_OK && fsync(fd) != 0)
        st = zero__error(ZERO_ERR_IO, "fsync of %s failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == ZERO_OK)
        st = zero__error(ZERO_ERR_IO, "close of %s failed: %s", tmp, strerror(errno));
    if (st == ZERO_OK && rename(tmp, path) != 0)
        st = zero__error(ZERO_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != ZERO_OK) {
        unlink(tmp);
        return st;
    }
    return zero__fsync_path(dir);
}

zero_status_t zero__read_file(const char *path, size_t max_bytes, char **out, size_t *size_out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zero__error(errno == ENOENT ? ZERO_ERR_FORMAT : ZERO_ERR_IO, "cannot open %s: %s",
                           path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return zero__error(ZERO_ERR_FORMAT, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return zero__error(ZERO_ERR_FORMAT, "%s is %lld bytes: expected at most %zu", path,
                           (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read %s", n, path);
    }
    zero_status_t s = zero__pread_all(fd, buf, n, 0, path);
    close(fd);
    if (s != ZERO_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    if (size_out) *size_out = n;
    return ZERO_OK;
}

uint64_t zero__mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

uint64_t zero__disk_free(const char *path) {
    struct statvfs vfs;
    if (statvfs(path && *path ? path : ".", &vfs) != 0) return 0;
    return (uint64_t)vfs.f_bavail * vfs.f_frsize;
}
