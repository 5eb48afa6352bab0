/* fileio.h — careful file I/O (fileio.c) for checkpoints and reports: full reads and writes that
 * retry on EINTR and short counts, fsync of files and directories, mkdir -p, atomic small-file
 * replacement. Each failure sets a message naming the path and errno's text.
 */
#ifndef ZERO_CORE_FILEIO_H
#define ZERO_CORE_FILEIO_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

zero_status_t zero__write_all(int fd, const void *buf, size_t bytes, const char *path);
zero_status_t zero__pwrite_all(int fd, const void *buf, size_t bytes, int64_t offset,
                               const char *path);
zero_status_t zero__pread_all(int fd, void *buf, size_t bytes, int64_t offset, const char *path);
zero_status_t zero__fsync_path(const char *path); /* file or directory */
zero_status_t zero__mkdir_p(const char *path);
/* The directory part of path into dir[n]: "." for a bare name, "/" for "/x". */
void zero__dir_of(const char *path, char *dir, size_t n);
/* Whether files can be created in an existing directory: a probe file is created and removed
 * (root ignores permission bits, so access(2) alone would not tell a read-only mount). */
zero_status_t zero__dir_writable(const char *path);
void zero__rmtree(const char *path); /* best effort, for our own temporary directories */
/* Write a small file atomically: path.tmp, fsync, rename, fsync of the parent directory. */
zero_status_t zero__write_file_atomic(const char *dir, const char *name, const void *data,
                                      size_t bytes);
/* Read a whole small file (<= max_bytes) into a malloc'ed, NUL-terminated buffer. */
zero_status_t zero__read_file(const char *path, size_t max_bytes, char **out, size_t *size_out);
/* MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read. */
uint64_t zero__mem_available(void);
/* Bytes free for an unprivileged writer on the file system holding path ("." when NULL or
 * empty); 0 when statvfs fails. */
uint64_t zero__disk_free(const char *path);

#endif /* ZERO_CORE_FILEIO_H */
