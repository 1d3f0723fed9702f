/* engine/engine.h: the engine thread and its two message queues.
 *
 * eng_start() moves a core (engine/core.h) onto a background thread. Other
 * threads talk to it only through messages copied by value: commands in
 * (submit, cancel, fork, close conversation, stop) and events out (tokens
 * with their text, finishes with metrics). Events are popped with eng_poll();
 * the read end of a pipe (eng_wake_fd) becomes readable whenever events are
 * waiting, so a poll() loop can sleep on it. Once per step the engine also
 * publishes a by-value snapshot (figures and the block map) that panels draw.
 * Commands and polling may come from any thread except the engine's own;
 * eng_stop() from the thread that started it. */
#ifndef PAGECHAT_ENGINE_H
#define PAGECHAT_ENGINE_H

#include "engine/core.h"

typedef struct eng eng;

typedef struct eng_event {
	enum core_event_kind kind;
	int64_t req;
	int conv, index;
	uint64_t step;
	int32_t token;
	char *text;              /* owned by the receiver (free with eng_event_clear) */
	size_t text_len;
	enum core_finish finish;
	core_req_metrics m;
} eng_event;

typedef struct eng_snapshot {
	uint64_t seq;            /* increases with every publication */
	core_stats st;
	double prefill_tps;      /* prompt rows computed per second, over the last
	                            half second or more (0 once idle that long) */
	double decode_tps;       /* tokens generated per second (target tokens: with
	                            drafts, the accepted ones), likewise */
	int64_t n_blocks;
	int block_tokens;
	core_block_info *map;    /* owned; [n_blocks] */
	int64_t map_cap;
} eng_snapshot;

/* Builds the core from p (the model and tokenizer stay borrowed and must
 * outlive the engine) and starts the thread. NULL with e filled. */
eng *eng_start(const core_params *p, err *e);
/* Asks the thread to finish its current step and exit, joins it, and frees
 * everything. Unfinished requests get no further events. NULL is a no-op. */
void eng_stop(eng *g);

/* Commands: copied into the queue; cannot fail. */
void eng_submit(eng *g, const core_request *r);
void eng_cancel(eng *g, int64_t id);
void eng_fork(eng *g, int64_t id, int index, int64_t new_id, int new_conv, uint64_t seed);
void eng_close_conv(eng *g, int conv);

int  eng_wake_fd(const eng *g);
/* Pops the oldest event into ev; false when none is waiting. */
bool eng_poll(eng *g, eng_event *ev);
void eng_event_clear(eng_event *ev);

/* Copies the latest snapshot into out if it is newer than out->seq; returns
 * whether it copied. out must start zeroed; release with eng_snapshot_deinit. */
bool eng_snapshot_get(eng *g, eng_snapshot *out);
void eng_snapshot_deinit(eng_snapshot *s);

#endif
