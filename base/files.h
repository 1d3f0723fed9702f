/* base/files.h: opening, reading and writing files safely (issue #25).
 *
 * Writing. Every file pagechat writes (quantize's model, saved chats, the
 * session, exports, logs, journals) goes through here:
 * - a file_out writes into an unnamed file in the target's directory
 *   (O_TMPFILE), so a process killed by a signal nobody sees (kill -9, the
 *   OOM killer) leaves nothing behind; where the file system has none, into
 *   a temporary file created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW) under
 *   an unpredictable name (".NAME.XXXX…" with random letters), so nobody can
 *   plant a link where it will be; file_out_commit() fsyncs it, names it so
 *   (an unnamed one through /proc/self/fd), renames it over the target and
 *   fsyncs the directory, so a reader sees the old file or the new one,
 *   never a mix;
 * - a target that exists and is not a regular file (a symbolic link, a
 *   device, a FIFO, a socket, a directory) is refused: it is never followed,
 *   truncated or replaced;
 * - every failure (a full disk included) removes the temporary file and says
 *   which file and why; so do SIGINT, SIGTERM and SIGHUP once
 *   file_cleanup_on_signals() is installed (the handler only unlinks);
 * - private directories (file_private_dir) are made 0700 and refused when
 *   another user owns them or every user may write in them.
 *
 * Reading. file_open_read() opens regular files only, without ever blocking:
 * a FIFO, a device or a directory is refused with a message instead of
 * hanging or reading forever. file_read_all() reads one whole, up to a limit
 * checked before anything is allocated.
 *
 * Functions fill an err naming the file and return -1 (or NULL) on failure;
 * none prints or exits. Any thread; a file_out belongs to one. */
#ifndef PAGECHAT_FILES_H
#define PAGECHAT_FILES_H

#include "base/base.h"

#include <stdio.h>

/* Modes for new files: private (chats, logs) or readable by all (models);
 * the process umask applies on top. */
#define FILE_MODE_PRIVATE 0600
#define FILE_MODE_SHARED 0666

/* A file being written (file_out_open fills it); open while path is set. */
typedef struct file_out {
	int fd;                  /* the temporary file; -1 once closed */
	char *path;              /* owned: the target */
	char *tmp;               /* owned: the temporary file's path; NULL while
	                            it is unnamed (O_TMPFILE) */
	int slot;                /* in the signal cleanup table; -1 when not there */
	uint8_t *buf;            /* owned; [cap] bytes gathered before a write */
	size_t n, cap;
	uint64_t written;        /* bytes accepted so far (buffered ones included) */
} file_out;

/* Starts writing path: checks that whatever is there now is a regular file
 * (or nothing), creates the temporary file with mode, and a buffer of
 * buf_bytes (0: 64 KiB; writes go out in whole buffers). 0, or -1 with e
 * (f is then closed: file_out_abort is a no-op on it). */
int file_out_open(file_out *f, const char *path, int mode, size_t buf_bytes, err *e);
/* Appends n bytes. 0, or -1 with e naming the file (a full disk: "No space
 * left on device"); the write is then abandoned (the temporary removed). */
int file_out_write(file_out *f, const void *p, size_t n, err *e);
/* Appends printf-style text; as file_out_write. */
int file_out_printf(file_out *f, err *e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Flushes, fsyncs, closes and renames the temporary over the target, then
 * fsyncs the directory. 0, or -1 with e (the temporary removed, the target
 * untouched). f is closed either way. */
int file_out_commit(file_out *f, err *e);
/* Abandons the write: closes and removes the temporary file. A closed or
 * zeroed file_out is fine. Cannot fail. */
void file_out_abort(file_out *f);

/* The whole of data[0..n) to path, atomically, as above. 0 or -1 with e. */
int file_write_atomic(const char *path, const void *data, size_t n, int mode, err *e);

/* A new, empty regular file at path, open for writing (and reading when
 * read is set), that replaces what was there (a regular file only; anything
 * else is refused as for file_out). For files written as they go (the
 * stderr log, journals). Returns the descriptor (close-on-exec), or -1 with
 * e. */
int file_create_fresh(const char *path, int mode, bool read, err *e);
/* path opened for appending, created with mode if missing; only a regular
 * file (a link is not followed). The descriptor, or -1 with e. */
int file_open_append(const char *path, int mode, err *e);

/* path opened for reading if it is a regular file (links are followed; a
 * FIFO or a device is refused without blocking). The descriptor
 * (close-on-exec, blocking), or -1 with e "PATH: ...". The size goes to
 * *size when size is not NULL. */
int file_open_read(const char *path, int64_t *size, err *e);
/* As file_open_read, as a stdio stream ("rb"). NULL with e. */
FILE *file_fopen_read(const char *path, err *e);
/* The whole regular file path in a new NUL-terminated buffer (the caller
 * frees it), its length in *len. A file longer than max bytes is refused
 * before anything is read (the message names the size and what), and so is
 * one that grows past it while being read. NULL with e. */
char *file_read_all(const char *path, size_t max, const char *what, size_t *len, err *e);

/* Creates path and its missing parents (mode 0700), then checks it: a
 * directory, owned by this user, not writable by every user. 0, or -1 with
 * e naming the directory and the fix. */
int file_private_dir(const char *path, err *e);

/* What kind of thing is at path, for messages: "a regular file", "a
 * symbolic link", "a directory", "a FIFO", "a device", "a socket", or
 * "nothing" when it does not exist. Never NULL. */
const char *file_kind(const char *path);

/* Mapped files. Reading a mapping whose file shrank since (or whose disk
 * failed) raises SIGBUS; with the mapping registered here the process ends
 * with one line naming the file ("pagechat: fatal: PATH: the file shrank
 * or could not be read while in use (offset N); ...") after the fatal hook
 * (base/base.h) ran, instead of a bare "Bus error". file_map_add
 * installs the handler on first use (a SIGBUS outside every registered
 * mapping keeps its previous course) and records [base, base + size) as
 * path's (up to 64 mappings; more are simply not named); file_map_remove
 * forgets it before the munmap. Any thread. */
void file_map_add(const void *base, size_t size, const char *path);
void file_map_remove(const void *base);

/* Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every
 * temporary file a file_out holds open, then let the signal take its
 * previous course (usually: the process ends with it). Idempotent. */
void file_cleanup_on_signals(void);

#endif
