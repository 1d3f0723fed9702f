/* kv/tier.c: tier 1 (host memory) and the glue to tier 2 (see kv_tier.h).
 *
 * Tier 1 is one allocation of n block-sized slots. A slot is free, keyed (a
 * cached block: on an LRU list, findable by key through an open-addressing
 * table with backward-shift deletion) or swapped (a preempted sequence's
 * block, owned until swapped back). */
#include "kv/tier.h"

#include "kv/store.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum slot_kind { SLOT_FREE, SLOT_KEYED, SLOT_SWAP };

typedef struct slot {
	uint8_t kind;            /* enum slot_kind */
	uint64_t key;
	int32_t prev, next;      /* LRU list (keyed) or free stack (next), -1 = none */
} slot;

struct kv_tier {
	size_t block_bytes;
	int block_tokens;
	int32_t n;               /* tier-1 slots */
	uint8_t *bytes;          /* owned (huge pages); [n][block_bytes] */
	int32_t *tokens;         /* owned; [n][block_tokens] of keyed slots */
	slot *s;                 /* owned; [n] */
	int32_t *map;            /* owned; [map_cap] slot of a key, -1 empty */
	size_t map_cap;
	int32_t lru_head, lru_tail, free_top;
	kv_store *store;         /* owned; NULL without tier 2 */
	uint64_t version;        /* bumped whenever tier 1's keyed blocks change */
	kv_tier_stats st;
};

/* ---- the key table ---- */

static size_t home(const kv_tier *t, uint64_t key)
{
	return (size_t)(key * 0x9e3779b97f4a7c15ull >> 7) & (t->map_cap - 1);
}

static size_t map_find(const kv_tier *t, uint64_t key)
{
	size_t i = home(t, key);
	while (t->map[i] >= 0 && t->s[t->map[i]].key != key)
		i = (i + 1) & (t->map_cap - 1);
	return i;
}

static void map_del(kv_tier *t, uint64_t key)
{
	size_t i = map_find(t, key), j = i;
	if (t->map[i] < 0)
		return;
	t->map[i] = -1;
	for (;;) {
		j = (j + 1) & (t->map_cap - 1);
		if (t->map[j] < 0)
			return;
		size_t h = home(t, t->s[t->map[j]].key);
		/* move j back to i when its home is not in (i, j] */
		if ((i < j) ? (h <= i || h > j) : (h <= i && h > j)) {
			t->map[i] = t->map[j];
			t->map[j] = -1;
			i = j;
		}
	}
}

/* ---- slots ---- */

static uint8_t *bytes_of(const kv_tier *t, int32_t i)
{
	return t->bytes + (size_t)i * t->block_bytes;
}

static void lru_unlink(kv_tier *t, int32_t i)
{
	slot *s = &t->s[i];
	if (s->prev >= 0)
		t->s[s->prev].next = s->next;
	else
		t->lru_head = s->next;
	if (s->next >= 0)
		t->s[s->next].prev = s->prev;
	else
		t->lru_tail = s->prev;
	s->prev = s->next = -1;
}

static void lru_append(kv_tier *t, int32_t i)
{
	t->s[i].prev = t->lru_tail;
	t->s[i].next = -1;
	if (t->lru_tail >= 0)
		t->s[t->lru_tail].next = i;
	else
		t->lru_head = i;
	t->lru_tail = i;
}

static void release(kv_tier *t, int32_t i)
{
	if (t->s[i].kind == SLOT_KEYED) {
		map_del(t, t->s[i].key);
		lru_unlink(t, i);
		t->st.host_keyed--;
		t->version++;
	} else if (t->s[i].kind == SLOT_SWAP) {
		t->st.host_swapped--;
	}
	t->s[i] = (slot){.kind = SLOT_FREE, .prev = -1, .next = t->free_top};
	t->free_top = i;
}

/* A slot for new contents: a free one, else the least recently used keyed
 * one (written to the store first when it is not there yet); -1 when every
 * slot holds a swapped block. */
static int32_t take_slot(kv_tier *t)
{
	if (t->free_top < 0 && t->lru_head >= 0) {
		int32_t v = t->lru_head;
		if (t->store)
			kv_store_write(t->store, t->s[v].key, t->tokens + (size_t)v * t->block_tokens, bytes_of(t, v));
		t->st.dropped++;
		release(t, v);
	}
	int32_t i = t->free_top;
	if (i >= 0)
		t->free_top = t->s[i].next;
	return i;
}

/* ---- the API ---- */

kv_tier *kv_tier_new(const kv_tier_params *p, err *e)
{
	kv_tier *t = xcalloc(1, sizeof *t);
	t->block_bytes = p->block_bytes;
	t->block_tokens = p->block_tokens;
	t->lru_head = t->lru_tail = t->free_top = -1;
	if (p->store_dir && !(t->store = kv_store_open(p->store_dir, p->fingerprint, p->block_tokens,
						       p->block_bytes, p->store_max_bytes, e))) {
		free(t);
		return NULL;
	}
	if (p->host_blocks > 0) {
		if (p->host_blocks > INT32_MAX / 2 ||
		    !(t->bytes = zalloc_huge((size_t)p->host_blocks * p->block_bytes))) {
			err_set(e, "KV host tier: no room for %lld blocks of %zu bytes: lower --kv-host",
				(long long)p->host_blocks, p->block_bytes);
			kv_tier_free(t);
			return NULL;
		}
		t->n = (int32_t)p->host_blocks;
		t->tokens = xmalloc((size_t)t->n * (size_t)t->block_tokens * sizeof *t->tokens);
		t->s = xmalloc((size_t)t->n * sizeof *t->s);
		for (int32_t i = t->n - 1; i >= 0; i--) {
			t->s[i].kind = SLOT_FREE;
			release(t, i);
		}
		for (t->map_cap = 16; t->map_cap < 2 * (size_t)t->n; t->map_cap *= 2)
			;
		t->map = xmalloc(t->map_cap * sizeof *t->map);
		memset(t->map, 0xff, t->map_cap * sizeof *t->map);
	}
	t->st.host_blocks = t->n;
	return t;
}

void kv_tier_free(kv_tier *t)
{
	if (!t)
		return;
	kv_store_close(t->store);
	if (t->bytes)
		huge_free(t->bytes, (size_t)t->n * t->block_bytes);
	free(t->tokens);
	free(t->s);
	free(t->map);
	free(t);
}

static int32_t host_find(const kv_tier *t, uint64_t key, const int32_t *tokens)
{
	if (t->n == 0)
		return -1;
	int32_t i = t->map[map_find(t, key)];
	if (i < 0 || memcmp(t->tokens + (size_t)i * t->block_tokens, tokens,
			    (size_t)t->block_tokens * sizeof *tokens))
		return -1;
	return i;
}

enum kv_tier_where kv_tier_find(const kv_tier *t, uint64_t key, const int32_t *tokens)
{
	if (host_find(t, key, tokens) >= 0)
		return TIER_HOST;
	if (t->store && kv_store_lists(t->store, key))
		return TIER_STORE;
	return TIER_MISS;
}

enum kv_tier_where kv_tier_probe(kv_tier *t, uint64_t key, const int32_t *tokens)
{
	if (host_find(t, key, tokens) >= 0)
		return TIER_HOST;
	if (t->store && kv_store_has(t->store, key, tokens))
		return TIER_STORE;
	return TIER_MISS;
}

uint64_t kv_tier_version(const kv_tier *t)
{
	return t->version + (t->store ? kv_store_version(t->store) : 0);
}

bool kv_tier_load(kv_tier *t, uint64_t key, const int32_t *tokens, void *dst, enum kv_tier_where *from)
{
	double t0 = now_s();
	int32_t i = host_find(t, key, tokens);
	bool ok = true;
	if (i >= 0) {
		memcpy(dst, bytes_of(t, i), t->block_bytes);
		lru_unlink(t, i);
		lru_append(t, i);
		*from = TIER_HOST;
		t->st.hits_host++;
	} else if (t->store && kv_store_read(t->store, key, tokens, dst)) {
		*from = TIER_STORE;
		t->st.hits_store++;
	} else {
		*from = TIER_MISS;
		ok = false;
	}
	if (ok)
		t->st.bytes_up += (int64_t)t->block_bytes;
	t->st.move_s += now_s() - t0;
	return ok;
}

void kv_tier_demote(kv_tier *t, uint64_t key, const int32_t *tokens, const void *bytes)
{
	if (t->n == 0 || host_find(t, key, tokens) >= 0)
		return;
	double t0 = now_s();
	size_t m = map_find(t, key);
	if (t->map[m] >= 0)          /* the same key with other tokens: replace it */
		release(t, t->map[m]);
	int32_t i = take_slot(t);
	if (i < 0)
		return;
	m = map_find(t, key);
	memcpy(bytes_of(t, i), bytes, t->block_bytes);
	memcpy(t->tokens + (size_t)i * t->block_tokens, tokens, (size_t)t->block_tokens * sizeof *tokens);
	t->s[i] = (slot){.kind = SLOT_KEYED, .key = key};
	lru_append(t, i);
	t->map[m] = i;
	t->st.host_keyed++;
	t->version++;
	t->st.demoted++;
	t->st.bytes_down += (int64_t)t->block_bytes;
	t->st.move_s += now_s() - t0;
}

bool kv_tier_persists(const kv_tier *t)
{
	return t->store && kv_store_get_stats(t->store).writable;
}

void kv_tier_persist(kv_tier *t, uint64_t key, const int32_t *tokens, const void *bytes)
{
	if (!t->store)
		return;
	double t0 = now_s();
	kv_store_write(t->store, key, tokens, bytes);
	t->st.move_s += now_s() - t0;
}

int32_t kv_tier_swap_out(kv_tier *t, const void *bytes)
{
	int32_t i = t->n ? take_slot(t) : -1;
	if (i < 0)
		return -1;
	memcpy(bytes_of(t, i), bytes, t->block_bytes);
	t->s[i] = (slot){.kind = SLOT_SWAP, .prev = -1, .next = -1};
	t->st.host_swapped++;
	t->st.swapped_out++;
	t->st.bytes_down += (int64_t)t->block_bytes;
	return i;
}

void kv_tier_swap_in(kv_tier *t, int32_t i, void *dst)
{
	assert(i >= 0 && i < t->n && t->s[i].kind == SLOT_SWAP);
	memcpy(dst, bytes_of(t, i), t->block_bytes);
	t->st.swapped_in++;
	t->st.bytes_up += (int64_t)t->block_bytes;
	release(t, i);
}

void kv_tier_swap_drop(kv_tier *t, int32_t i)
{
	assert(i >= 0 && i < t->n && t->s[i].kind == SLOT_SWAP);
	release(t, i);
}

kv_tier_stats kv_tier_get_stats(const kv_tier *t)
{
	kv_tier_stats st = t->st;
	st.has_store = t->store != NULL;
	if (t->store) {
		kv_store_stats ss = kv_store_get_stats(t->store);
		st.store_files_written = ss.files_written;
		st.store_bytes = ss.bytes_on_disk;
		st.store_bad_files = ss.bad_files;
		st.store_opens = ss.opens;
		st.store_writable = ss.writable;
	}
	return st;
}

const char *kv_tier_notice(const kv_tier *t)
{
	return t->store ? kv_store_notice(t->store) : NULL;
}

void kv_tier_add_time(kv_tier *t, double s, int64_t up, int64_t down)
{
	t->st.move_s += s;
	t->st.bytes_up += up;
	t->st.bytes_down += down;
}

/* ---- the fingerprint ---- */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

/* A fast 64-bit hash of n bytes from seed: four independent
 * lanes over 32-byte stripes (so their multiplies overlap), each step a
 * bijection of its lane for a given word, so two inputs that differ in one
 * word always differ in the result; then the lanes, the tail and the length
 * are folded. Not cryptographic, and it need not be: it tells an edited or
 * another model from this one (a chance collision is 2^-64), and whoever
 * could craft a colliding model file could as well replace the model
 * outright. It runs near memory speed, so covering every weight costs about
 * one more read of the file, once per file (kv_store_weights_* cache it). */
static uint64_t weights_hash(uint64_t seed, const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t acc[4] = {seed + 0x9e3779b97f4a7c15ull, seed ^ 0xbf58476d1ce4e5b9ull, seed - 0x94d049bb133111ebull,
			   ~seed};
	size_t i = 0;
	for (; i + 32 <= n; i += 32)
		for (int l = 0; l < 4; l++) {
			uint64_t w;
			memcpy(&w, b + i + 8 * (size_t)l, 8);
			acc[l] = ROTL(acc[l] + w * 0xbf58476d1ce4e5b9ull, 29) * 0x94d049bb133111ebull;
		}
	uint64_t h = seed ^ n;
	for (int l = 0; l < 4; l++)
		h = mix64(h ^ acc[l]);
	return kv_hash_bytes(h, b + i, n - i);
}

/* Every byte of the file f: the weights, and the metadata and tensor infos
 * that say how they are used (cached in dir, a store's directory, by the
 * file's identity; NULL: no cache). */
static uint64_t model_bytes(const gguf_file *f, const char *dir)
{
	gguf_ident id;
	uint64_t w;
	bool known = dir && gguf_identity(f, &id);
	if (known && kv_store_weights_get(dir, &id, &w))
		return w;
	w = weights_hash(0x77e1, gguf_bytes(f), (size_t)gguf_file_bytes(f));
	if (known)
		kv_store_weights_put(dir, &id, w);
	return w;
}

uint64_t kv_tier_fingerprint(const llama_model *m, enum kv_type k_type, enum kv_type v_type,
			     int block_tokens, const char *cache_dir)
{
	const llama_hparams *hp = llama_hp(m);
	const gguf_file *f = llama_file(m);
	int64_t dims[] = {hp->n_vocab, hp->dim, hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim,
			  hp->ffn_dim, hp->n_rot, hp->rope_neox, hp->has_qkv_bias, hp->has_qk_norm,
			  hp->tied_output, k_type, v_type, block_tokens, (int64_t)gguf_file_bytes(f)};
	float rope[] = {hp->eps, hp->rope_base, hp->rope_freq_scale};
	uint64_t h = kv_hash_bytes(0x5eed, hp->arch, strnlen(hp->arch, sizeof hp->arch));
	h = kv_hash_bytes(h, dims, sizeof dims);
	h = kv_hash_bytes(h, rope, sizeof rope);
	uint64_t w = model_bytes(f, cache_dir);
	return kv_hash_bytes(h, &w, sizeof w);
}
