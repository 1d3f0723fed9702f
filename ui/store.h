/* ui/store.h: conversations on disk, so that nothing is lost.
 *
 * Each tab is one readable JSON file (store_save: written to a temporary
 * file, fsync'd, then renamed over the old one, so a reader sees the old or
 * the new version, never a mix). While an answer streams, each piece of text
 * is also appended to a small journal beside it (FILE.stream: a header line
 * naming the message and how long it was when the journal began, then the
 * raw text), and each token id to a second one (FILE.ids); store_load()
 * replays both, so a kill -9 loses at most what was not yet written. A chat
 * keeps its token history (each message's ids, conv/conv.h) and the model
 * it was made on beside the text. The session file lists the open tabs for --resume. The
 * directory is $XDG_DATA_HOME/pagechat, else $HOME/.local/share/pagechat.
 * Every file is written through base/files.h (an exclusive temporary
 * beside it, never through a link, never over a device or FIFO) and read
 * only when it is a regular file, so a FIFO in a chat's place fails at once.
 * Plain file I/O; the UI thread only. */
#ifndef PAGECHAT_STORE_H
#define PAGECHAT_STORE_H

#include "conv/conv.h"

/* Writes the data directory's path into buf (cap bytes) and creates it (and
 * its parents, mode 0700) if missing. -1 with e filled, also when it is
 * another user's or writable by every user (base/files.h). */
int store_data_dir(char *buf, size_t cap, err *e);

/* Writes data[len] to path atomically (an exclusive temporary file, fsync,
 * rename, fsync of the directory; file_write_atomic, mode 0600). -1 with e
 * naming the file; path is then untouched. */
int store_write_atomic(const char *path, const char *data, size_t len, err *e);

/* Saves c as JSON at path (atomically). -1 with e filled. */
int store_save(const conv *c, const char *path, err *e);
/* Loads path into c (uninitialised; conv_deinit it on success), then replays
 * path's journal if there is one. A message that was streaming when the file
 * was last written gets finish "interrupted". -1 with e naming the file and
 * the reason (missing, not a regular file, unreadable, not JSON, a field; c
 * is then left zeroed): the caller shows the chat as damaged and keeps the
 * file. */
int store_load(conv *c, const char *path, err *e);

/* The journal of one streaming message. */
typedef struct store_journal {
	bool is_open;            /* a zeroed journal is closed */
	int fd;                  /* when is_open */
	char path[4200];
	bool ids_is_open;        /* the ids journal (FILE.ids) */
	int ids_fd;              /* when ids_is_open */
	char ids_path[4200];
} store_journal;

/* Starts (or restarts) the journal of message msg of c, saved at chat_path,
 * whose text is already saved up to its current length. -1 with e filled
 * (the journal is then closed; streaming goes on without it). */
int store_journal_begin(store_journal *j, const char *chat_path, const conv *c, int msg, err *e);
/* Appends text; a failed write closes the journal (the next save still has
 * everything). Cannot fail. */
void store_journal_append(store_journal *j, const char *text, size_t len);
/* Appends one id of the answer to the ids journal (FILE.ids, beside the
 * text's: store_load adds them to the message's ids and counts its tokens
 * from them). Cannot fail: a failed write closes that journal. */
void store_journal_append_id(store_journal *j, int32_t id);
/* Closes and removes the journal (after the final save). A closed one is fine. */
void store_journal_end(store_journal *j);

/* Removes chat_path's journal, if any (once a save holds all its text). */
void store_journal_remove(const char *chat_path);

/* Writes c as Markdown to path, atomically (path is replaced only when it
 * is a regular file). -1 with e filled. */
int store_export_md(const conv *c, const char *path, err *e);

/* The session: the open tabs' file names (relative to dir) in order and the
 * active one. */
int store_session_save(const char *dir, const char *const *files, int n, int active, err *e);
/* Loads the session of dir: *files gets a new array of n new strings (free
 * each and the array). 0 with *n == 0 when there is no session; -1 with e for
 * a damaged one. */
int store_session_load(const char *dir, char ***files, int *n, int *active, err *e);
/* Whether dir holds a session file at all (a chat has run there before). */
bool store_session_exists(const char *dir);

#endif
