/* tests/test_kv_pool.c: the paged KV pool, checked after every operation. */
#include "kv/pool.h"

#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

static kv_pool *new_pool(int n_layers, int kv_dim, int block_tokens, int64_t n_blocks)
{
	kv_pool_params p = { .n_layers = n_layers, .kv_dim = kv_dim,
			     .block_tokens = block_tokens, .n_blocks = n_blocks };
	err e = { "" };
	kv_pool *pool = kv_pool_new(&p, &e);
	CHECK_(pool != NULL, "kv_pool_new: %s", e.msg);
	return pool;
}

/* Runs kv_pool_check over seqs and counts it as one check. */
static void check_pool(const kv_pool *pool, kv_seq **seqs, int n_seqs, const int32_t *extra)
{
	err e = { "" };
	bool ok = kv_pool_check(pool, (const kv_seq *const *)seqs, n_seqs, extra, &e);
	CHECK_(ok, "kv_pool_check: %s", e.msg);
}

/* Expects kv_pool_new(p) to fail with a message containing word. */
static void expect_bad(kv_pool_params p, const char *word)
{
	err e = { "" };
	kv_pool *pool = kv_pool_new(&p, &e);
	CHECK_(pool == NULL, "expected failure naming '%s'", word);
	CHECK_(strstr(e.msg, word) != NULL, "message '%s' should name '%s'", e.msg, word);
	kv_pool_free(pool);
}

static void test_bad_params(void)
{
	kv_pool_params ok = { .n_layers = 2, .kv_dim = 8, .block_tokens = 4, .n_blocks = 4 };
	kv_pool_params p;
	p = ok; p.n_layers = 0; expect_bad(p, "n_layers");
	p = ok; p.n_layers = 1 << 20; expect_bad(p, "n_layers");
	p = ok; p.kv_dim = -1; expect_bad(p, "kv_dim");
	p = ok; p.block_tokens = 0; expect_bad(p, "block_tokens");
	p = ok; p.n_blocks = -3; expect_bad(p, "n_blocks");
	p = ok; p.n_blocks = 0; p.max_bytes = -1; expect_bad(p, "max_bytes");
	p = ok; p.n_blocks = 0; p.max_bytes = 0; expect_bad(p, "n_blocks or max_bytes");
	p = ok; p.n_blocks = 0; p.max_bytes = 511; expect_bad(p, "holds no block");
	p = ok; p.n_blocks = INT64_C(1) << 40; expect_bad(p, "n_blocks");
	p = ok; p.n_blocks = INT64_MAX; expect_bad(p, "n_blocks");
	p = ok; p.n_blocks = 0; p.max_bytes = INT64_MAX; expect_bad(p, "max_bytes");
	/* Each dimension at its limit: the byte count would overflow 2^63 without care. */
	p = (kv_pool_params){ .n_layers = 1 << 12, .kv_dim = 1 << 20, .block_tokens = 1 << 16,
			      .n_blocks = INT64_C(1) << 30 };
	expect_bad(p, "n_blocks");
	p = (kv_pool_params){ .n_layers = 80, .kv_dim = 1024, .block_tokens = 16,
			      .n_blocks = 1 << 24 };
	expect_bad(p, "past the limit");
	kv_pool *pool = kv_pool_new(&ok, NULL); /* e may be NULL */
	CHECK(pool != NULL);
	kv_pool_free(pool);
}

static void test_byte_budget(void)
{
	/* 2 (K,V) * 2 layers * 4 tokens * 8 floats * 4 bytes = 512 bytes a block. */
	kv_pool_params p = { .n_layers = 2, .kv_dim = 8, .block_tokens = 4, .max_bytes = 512 * 10 + 511 };
	kv_pool *pool = kv_pool_new(&p, NULL);
	CHECK(pool != NULL);
	CHECK_EQ_INT(kv_pool_bytes_per_block(pool), 512);
	CHECK_EQ_INT(kv_pool_n_blocks(pool), 10);
	CHECK_EQ_INT(kv_pool_n_free(pool), 10);
	CHECK_EQ_INT(kv_pool_block_tokens(pool), 4);
	kv_view v = kv_pool_view(pool);
	CHECK_EQ_INT(v.n_slots, 40);
	CHECK_EQ_INT(v.n_layers, 2);
	CHECK_EQ_INT(v.kv_dim, 8);
	CHECK_EQ_INT(v.block_tokens, 4);
	CHECK(v.k != NULL && v.v != NULL && v.k != v.v);
	check_pool(pool, NULL, 0, NULL);
	kv_pool_free(pool);

	p.max_bytes = 512;
	pool = kv_pool_new(&p, NULL);
	CHECK(pool && kv_pool_n_blocks(pool) == 1);
	kv_pool_free(pool);

	p.n_blocks = 3; /* n_blocks wins over max_bytes */
	pool = kv_pool_new(&p, NULL);
	CHECK(pool && kv_pool_n_blocks(pool) == 3);
	kv_pool_free(pool);
	kv_pool_free(NULL);
}

static void test_alloc_order(void)
{
	kv_pool *pool = new_pool(1, 4, 4, 8);
	int32_t extra[8] = { 0 };
	for (int32_t i = 0; i < 8; i++) {
		CHECK_EQ_INT(kv_pool_alloc(pool), i);
		extra[i] = 1;
		check_pool(pool, NULL, 0, extra);
	}
	CHECK_EQ_INT(kv_pool_alloc(pool), -1);
	CHECK_EQ_INT(kv_pool_n_free(pool), 0);
	check_pool(pool, NULL, 0, extra);

	/* Freed blocks go to the tail: they come back least recently freed first. */
	const int32_t order[] = { 3, 1, 5, 0 };
	for (int i = 0; i < 4; i++) {
		kv_pool_unref(pool, order[i]);
		extra[order[i]] = 0;
		CHECK(kv_pool_is_free(pool, order[i]));
		check_pool(pool, NULL, 0, extra);
	}
	CHECK(!kv_pool_is_free(pool, 2));
	CHECK_EQ_INT(kv_pool_n_free(pool), 4);

	/* Pull 1 out of the middle of the list, then 3 (the head). */
	kv_pool_unlink_free(pool, 1);
	extra[1] = 1;
	CHECK_EQ_INT(kv_pool_refcount(pool, 1), 1);
	check_pool(pool, NULL, 0, extra);
	kv_pool_unlink_free(pool, 3);
	extra[3] = 1;
	check_pool(pool, NULL, 0, extra);
	/* Then the tail: 0 is last, 5 remains. */
	kv_pool_unlink_free(pool, 0);
	extra[0] = 1;
	check_pool(pool, NULL, 0, extra);
	CHECK_EQ_INT(kv_pool_alloc(pool), 5);
	extra[5] = 1;
	CHECK_EQ_INT(kv_pool_alloc(pool), -1);
	check_pool(pool, NULL, 0, extra);
	kv_pool_free(pool);
}

static void test_refcounts(void)
{
	kv_pool *pool = new_pool(1, 4, 4, 4);
	int32_t extra[4] = { 0 };
	int32_t b = kv_pool_alloc(pool);
	extra[b] = 1;
	kv_pool_ref(pool, b);
	kv_pool_ref(pool, b);
	extra[b] = 3;
	CHECK_EQ_INT(kv_pool_refcount(pool, b), 3);
	CHECK_EQ_INT(kv_pool_get_stats(pool, NULL, 0).n_shared, 1);
	check_pool(pool, NULL, 0, extra);
	kv_pool_unref(pool, b);
	kv_pool_unref(pool, b);
	extra[b] = 1;
	CHECK_EQ_INT(kv_pool_refcount(pool, b), 1);
	CHECK_EQ_INT(kv_pool_get_stats(pool, NULL, 0).n_shared, 0);
	CHECK(!kv_pool_is_free(pool, b));
	check_pool(pool, NULL, 0, extra);
	kv_pool_unref(pool, b);
	extra[b] = 0;
	CHECK(kv_pool_is_free(pool, b));
	CHECK_EQ_INT(kv_pool_n_free(pool), 4);
	check_pool(pool, NULL, 0, extra);
	kv_pool_free(pool);
}

static void test_reserve(void)
{
	kv_pool *pool = new_pool(1, 4, 4, 4);
	kv_seq a, b;
	kv_seq_init(&a);
	kv_seq_init(&b);
	kv_seq *seqs[] = { &a, &b };
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 0), 0);
	CHECK_EQ_INT(a.n_blocks, 0);
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 10), 0);
	a.n_tokens = 10;
	CHECK_EQ_INT(a.n_blocks, 3);
	CHECK(a.blocks[0] == 0 && a.blocks[1] == 1 && a.blocks[2] == 2);
	check_pool(pool, seqs, 2, NULL);
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 12), 0); /* fits already */
	CHECK_EQ_INT(a.n_blocks, 3);

	/* b needs 2 blocks, 1 is free: nothing is taken. */
	CHECK_EQ_INT(kv_seq_reserve(pool, &b, 8), -1);
	CHECK(b.n_blocks == 0 && b.cap == 0 && b.blocks == NULL && b.n_tokens == 0);
	CHECK_EQ_INT(kv_pool_n_free(pool), 1);
	check_pool(pool, seqs, 2, NULL);

	/* a needs 2 more, 1 is free: a is unchanged. */
	int32_t cap = a.cap, *tab = a.blocks;
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 20), -1);
	CHECK(a.n_blocks == 3 && a.cap == cap && a.blocks == tab && a.n_tokens == 10);
	CHECK(a.blocks[0] == 0 && a.blocks[1] == 1 && a.blocks[2] == 2);
	CHECK_EQ_INT(kv_pool_n_free(pool), 1);
	check_pool(pool, seqs, 2, NULL);

	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 13), 0);
	CHECK_EQ_INT(a.n_blocks, 4);
	CHECK_EQ_INT(kv_pool_n_free(pool), 0);
	check_pool(pool, seqs, 2, NULL);

	/* Release frees from the end: the prefix is the most recently freed. */
	kv_seq_release(pool, &a);
	CHECK(a.n_blocks == 0 && a.cap == 0 && a.blocks == NULL && a.n_tokens == 0);
	check_pool(pool, seqs, 2, NULL);
	CHECK_EQ_INT(kv_seq_reserve(pool, &b, 16), 0);
	CHECK(b.blocks[0] == 3 && b.blocks[1] == 2 && b.blocks[2] == 1 && b.blocks[3] == 0);
	check_pool(pool, seqs, 2, NULL);
	kv_seq_release(pool, &b);
	kv_seq_release(pool, &b); /* releasing an empty table is fine */
	check_pool(pool, seqs, 2, NULL);
	kv_pool_free(pool);
}

static void test_table_growth(void)
{
	kv_pool *pool = new_pool(1, 2, 2, 300);
	kv_seq s;
	kv_seq_init(&s);
	kv_seq *seqs[] = { &s };
	for (int64_t n = 1; n <= 600; n++) {
		CHECK_EQ_INT(kv_seq_reserve(pool, &s, n), 0);
		s.n_tokens = n;
		CHECK_EQ_INT(s.n_blocks, (n + 1) / 2);
		CHECK(s.cap >= s.n_blocks && s.cap <= MAX(8, 2 * s.n_blocks)); /* doubling, from 8 */
	}
	for (int32_t i = 0; i < s.n_blocks; i++)
		CHECK_EQ_INT(s.blocks[i], i);
	check_pool(pool, seqs, 1, NULL);
	CHECK_EQ_INT(kv_seq_reserve(pool, &s, 601), -1);
	kv_seq_release(pool, &s);
	kv_pool_free(pool);
}

static void test_truncate(void)
{
	kv_pool *pool = new_pool(1, 4, 4, 8);
	kv_seq a, b;
	kv_seq_init(&a);
	kv_seq_init(&b);
	kv_seq *seqs[] = { &a, &b };
	CHECK_EQ_INT(kv_seq_reserve(pool, &a, 20), 0);
	a.n_tokens = 18;
	CHECK_EQ_INT(kv_seq_truncate(pool, &a, 9), 2); /* keeps blocks for 0..8 */
	CHECK_EQ_INT(a.n_blocks, 3);
	CHECK_EQ_INT(a.n_tokens, 9);
	CHECK_EQ_INT(kv_pool_n_free(pool), 5);
	check_pool(pool, seqs, 2, NULL);
	CHECK_EQ_INT(kv_seq_truncate(pool, &a, 12), 0); /* past n_tokens: nothing */
	CHECK_EQ_INT(a.n_tokens, 9);
	CHECK_EQ_INT(kv_seq_truncate(pool, &a, 100), 0);
	CHECK_EQ_INT(a.n_blocks, 3);
	CHECK_EQ_INT(kv_seq_truncate(pool, &a, 8), 1); /* exactly 2 blocks */
	CHECK_EQ_INT(a.n_blocks, 2);
	CHECK_EQ_INT(a.n_tokens, 8);
	check_pool(pool, seqs, 2, NULL);

	/* b shares a's blocks (a fork): truncating b only drops references. */
	b.blocks = xmalloc(2 * sizeof(int32_t));
	b.cap = 2;
	for (int i = 0; i < 2; i++) {
		kv_pool_ref(pool, a.blocks[i]);
		b.blocks[b.n_blocks++] = a.blocks[i];
	}
	b.n_tokens = 8;
	check_pool(pool, seqs, 2, NULL);
	CHECK_EQ_INT(kv_pool_get_stats(pool, (const kv_seq *const *)seqs, 2).n_shared, 2);
	CHECK_EQ_INT(kv_seq_truncate(pool, &b, 3), 1);
	CHECK_EQ_INT(kv_pool_refcount(pool, a.blocks[1]), 1);
	CHECK_EQ_INT(kv_pool_refcount(pool, a.blocks[0]), 2);
	CHECK_EQ_INT(kv_pool_n_free(pool), 6);
	check_pool(pool, seqs, 2, NULL);
	CHECK_EQ_INT(kv_seq_truncate(pool, &a, 0), 2);
	CHECK(a.n_blocks == 0 && a.n_tokens == 0);
	CHECK_EQ_INT(kv_pool_n_free(pool), 7);
	check_pool(pool, seqs, 2, NULL);
	kv_seq_release(pool, &a);
	kv_seq_release(pool, &b);
	CHECK_EQ_INT(kv_pool_n_free(pool), 8);
	check_pool(pool, seqs, 2, NULL);
	kv_pool_free(pool);
}

static void test_slots_and_stats(void)
{
	kv_pool *pool = new_pool(2, 4, 4, 8);
	/* Arrange the free list as 5, 2, 7, ... by taking and giving back. */
	for (int i = 0; i < 8; i++)
		kv_pool_alloc(pool);
	const int32_t give[] = { 5, 2, 7, 0, 1, 3, 4, 6 };
	for (int i = 0; i < 8; i++)
		kv_pool_unref(pool, give[i]);
	kv_seq s, t;
	kv_seq_init(&s);
	kv_seq_init(&t);
	CHECK_EQ_INT(kv_seq_reserve(pool, &s, 11), 0);
	s.n_tokens = 11;
	CHECK(s.blocks[0] == 5 && s.blocks[1] == 2 && s.blocks[2] == 7);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 0), 20);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 3), 23);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 4), 8);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 7), 11);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 8), 28);
	CHECK_EQ_INT(kv_seq_slot(pool, &s, 11), 31); /* reserved, not yet filled */
	CHECK_EQ_INT(kv_seq_reserve(pool, &t, 1), 0);
	t.n_tokens = 1;
	CHECK_EQ_INT(kv_seq_slot(pool, &t, 0), 0);

	kv_seq *seqs[] = { &s, &t };
	kv_pool_stats st = kv_pool_get_stats(pool, (const kv_seq *const *)seqs, 2);
	CHECK_EQ_INT(st.n_blocks, 8);
	CHECK_EQ_INT(st.n_used, 4);
	CHECK_EQ_INT(st.n_free, 4);
	CHECK_EQ_INT(st.n_shared, 0);
	CHECK_EQ_INT(st.bytes_per_block, 2 * 2 * 4 * 4 * 4);
	CHECK_EQ_INT(st.n_slots_alloc, 16);
	CHECK_EQ_INT(st.n_slots_filled, 12);
	check_pool(pool, seqs, 2, NULL);
	kv_seq_release(pool, &s);
	kv_seq_release(pool, &t);
	kv_pool_free(pool);
}

static void test_copy_block(void)
{
	enum { L = 3, D = 5, BT = 4, NB = 6 };
	kv_pool *pool = new_pool(L, D, BT, NB);
	kv_view v = kv_pool_view(pool);
	float *vk = v.k, *vv = v.v; /* f32 rows */
	int64_t n = (int64_t)L * NB * BT * D;
	for (int64_t i = 0; i < n; i++) {
		vk[i] = (float)i;
		vv[i] = (float)-i - 0.5f;
	}
	for (int i = 0; i < NB; i++)
		kv_pool_alloc(pool);
	kv_pool_copy_block(pool, 4, 1);
	int bad = 0;
	for (int l = 0; l < L; l++)
		for (int64_t slot = 0; slot < (int64_t)NB * BT; slot++)
			for (int d = 0; d < D; d++) {
				int64_t i = ((int64_t)l * NB * BT + slot) * D + d;
				int64_t src = i;
				if (slot / BT == 4)
					src = ((int64_t)l * NB * BT + (slot - 3 * BT)) * D + d;
				bad += vk[i] != (float)src;
				bad += vv[i] != (float)-src - 0.5f;
			}
	CHECK_EQ_INT(bad, 0);
	int32_t extra[NB] = { 1, 1, 1, 1, 1, 1 };
	check_pool(pool, NULL, 0, extra);
	kv_pool_free(pool);
}

/* Partial offload on the fake device: the first host_layers layers in host
 * memory, the rest on the device; copy-on-write copies every layer in its
 * own memory; the figures split the bytes. */
static void test_split(void)
{
	enum { L = 3, D = 5, BT = 4, NB = 6 };
	for (int lo = 0; lo <= L; lo++) {
		int64_t used0 = kern_fake_get_counts().used_bytes;
		kv_pool_params p = {.n_layers = L, .kv_dim = D, .block_tokens = BT, .n_blocks = NB,
				    .kern = kern_fake(), .host_layers = lo};
		err e = {""};
		kv_pool *pool = kv_pool_new(&p, &e);
		CHECK_(pool != NULL, "host_layers %d: %s", lo, e.msg);
		if (!pool)
			continue;
		kv_view v = kv_pool_view(pool);
		CHECK_EQ_INT(v.n_lo, lo < L ? lo : 0);
		CHECK((v.k_hi != NULL) == (lo > 0 && lo < L));
		for (int l = 0; l < L; l++) {
			void *k, *vv;
			kv_view_layer(&v, l, &k, &vv);
			for (int i = 0; i < NB * BT * D; i++) {
				((float *)k)[i] = (float)(l * 1000 + i);
				((float *)vv)[i] = -(float)(l * 1000 + i);
			}
		}
		for (int i = 0; i < NB; i++)
			kv_pool_alloc(pool);
		kv_pool_copy_block(pool, 5, 2);
		int bad = 0;
		for (int l = 0; l < L; l++) {
			void *k, *vv;
			kv_view_layer(&v, l, &k, &vv);
			for (int i = 0; i < BT * D; i++) {
				float want = (float)(l * 1000 + 2 * BT * D + i);
				bad += ((float *)k)[5 * BT * D + i] != want || ((float *)vv)[5 * BT * D + i] != -want;
			}
		}
		CHECK_EQ_INT(bad, 0);
		kv_pool_stats st = kv_pool_get_stats(pool, NULL, 0);
		int dev_layers = lo < L ? L - lo : 0;
		int64_t per_layer = (int64_t)NB * BT * D * 4 * 2;
		CHECK(st.dev_layers == dev_layers && st.dev_bytes == dev_layers * per_layer &&
		      st.host_bytes == (L - dev_layers) * per_layer);
		CHECK_EQ_INT(kern_fake_get_counts().used_bytes - used0, dev_layers * per_layer);
		kv_pool_free(pool);
		CHECK_EQ_INT(kern_fake_get_counts().used_bytes, used0);
	}
	/* a device too small for its part: an error naming both memories */
	kern_fake_set_mem(100);
	kv_pool_params p = {.n_layers = L, .kv_dim = D, .block_tokens = BT, .n_blocks = NB,
			    .kern = kern_fake(), .host_layers = 1};
	expect_bad(p, "host and device");
	kern_fake_set_mem(0);
	p.host_layers = -1;
	expect_bad(p, "host_layers");
}

static void test_check_detects(void)
{
	kv_pool *pool = new_pool(1, 4, 4, 4);
	kv_seq s;
	kv_seq_init(&s);
	kv_seq *seqs[] = { &s };
	err e = { "" };
	CHECK_EQ_INT(kv_seq_reserve(pool, &s, 8), 0);
	CHECK(kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));

	kv_pool_ref(pool, s.blocks[1]); /* a reference nobody records */
	CHECK(!kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));
	CHECK_(strstr(e.msg, "block 1 has refcount 2 but 1 references") != NULL, "msg: %s", e.msg);
	int32_t extra[4] = { 0, 1, 0, 0 };
	CHECK(kv_pool_check(pool, (const kv_seq *const *)seqs, 1, extra, &e));
	kv_pool_unref(pool, s.blocks[1]);
	CHECK(kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));

	/* A table that forgets a block it holds. */
	s.n_blocks = 1;
	CHECK(!kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));
	CHECK_(strstr(e.msg, "block 1") != NULL, "msg: %s", e.msg);
	s.n_blocks = 2;

	/* A table entry out of range, and n_tokens past the capacity. */
	s.blocks[0] = 9;
	CHECK(!kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));
	CHECK_(strstr(e.msg, "out of range") != NULL, "msg: %s", e.msg);
	s.blocks[0] = 0;
	s.n_tokens = 9;
	CHECK(!kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));
	CHECK_(strstr(e.msg, "n_tokens") != NULL, "msg: %s", e.msg);
	s.n_tokens = 8;

	/* A table listing the same block twice (a missed ref on fork). */
	s.blocks[1] = 0;
	CHECK(!kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));
	s.blocks[1] = 1;
	CHECK(kv_pool_check(pool, (const kv_seq *const *)seqs, 1, NULL, &e));

	/* A seq missing from the list: its blocks look leaked. */
	CHECK(!kv_pool_check(pool, NULL, 0, NULL, &e));
	kv_seq_release(pool, &s);
	CHECK(kv_pool_check(pool, NULL, 0, NULL, &e));
	kv_pool_free(pool);
}

/* ---- randomized: the pool against a model of refcounts and free order ---- */

enum { R_BLOCKS = 48, R_SEQS = 6, R_BT = 4, R_OPS = 20000 };

typedef struct model {
	int32_t rc[R_BLOCKS];
	int32_t extra[R_BLOCKS];    /* references the test holds outside tables */
	int32_t free_list[R_BLOCKS];/* expected order, head first */
	int n_free;
} model;

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

static void model_unref(model *m, int32_t b)
{
	if (--m->rc[b] == 0)
		m->free_list[m->n_free++] = b;
}

static void model_take(model *m, int pos)
{
	int32_t b = m->free_list[pos];
	memmove(m->free_list + pos, m->free_list + pos + 1, (size_t)(m->n_free - pos - 1) * sizeof(int32_t));
	m->n_free--;
	m->rc[b] = 1;
}

static int n_reserve_full; /* reserves refused for lack of blocks */

static int op_reserve(kv_pool *pool, model *m, kv_seq *s)
{
	int64_t n = rnd(R_BT * 16);
	int64_t need = (n + R_BT - 1) / R_BT, more = need - s->n_blocks;
	int32_t old_n = s->n_blocks;
	int rc = kv_seq_reserve(pool, s, n);
	if (more > m->n_free) {
		n_reserve_full++;
		return rc == -1 && s->n_blocks == old_n;
	}
	if (rc != 0)
		return 0;
	int ok = 1;
	for (int32_t i = old_n; i < s->n_blocks; i++) {
		ok &= s->blocks[i] == m->free_list[0];
		model_take(m, 0);
	}
	s->n_tokens = rnd((uint32_t)(s->n_blocks * R_BT + 1));
	return ok;
}

static int op_truncate(kv_pool *pool, model *m, kv_seq *s, int64_t n)
{
	int64_t keep = (n + R_BT - 1) / R_BT;
	int expect = 0;
	for (int32_t i = s->n_blocks - 1; i >= keep; i--, expect++)
		model_unref(m, s->blocks[i]);
	int64_t want_tokens = MIN(s->n_tokens, n);
	int got = kv_seq_truncate(pool, s, n);
	return got == expect && s->n_tokens == want_tokens;
}

static int op_fork(kv_pool *pool, model *m, kv_seq *dst, const kv_seq *src)
{
	if (dst == src)
		return 1;
	int ok = op_truncate(pool, m, dst, 0);
	if (dst->cap < src->n_blocks) {
		dst->blocks = xrealloc(dst->blocks, (size_t)src->n_blocks * sizeof(int32_t));
		dst->cap = src->n_blocks;
	}
	for (int32_t i = 0; i < src->n_blocks; i++) {
		kv_pool_ref(pool, src->blocks[i]);
		m->rc[src->blocks[i]]++;
		dst->blocks[i] = src->blocks[i];
	}
	dst->n_blocks = src->n_blocks;
	dst->n_tokens = src->n_tokens;
	return ok;
}

static int op_extra(kv_pool *pool, model *m)
{
	int32_t b = (int32_t)rnd(R_BLOCKS);
	switch (rnd(4)) {
	case 0: /* hold another reference to a block in use */
		if (m->rc[b] == 0)
			return 1;
		kv_pool_ref(pool, b);
		m->rc[b]++;
		m->extra[b]++;
		return 1;
	case 1: /* drop a held reference */
		if (m->extra[b] == 0)
			return 1;
		kv_pool_unref(pool, b);
		m->extra[b]--;
		model_unref(m, b);
		return 1;
	case 2: { /* pull an arbitrary free block out (prefix-cache hit) */
		if (m->n_free == 0)
			return 1;
		int pos = (int)rnd((uint32_t)m->n_free);
		b = m->free_list[pos];
		if (!kv_pool_is_free(pool, b))
			return 0;
		kv_pool_unlink_free(pool, b);
		model_take(m, pos);
		m->extra[b]++;
		return 1;
	}
	default: { /* plain alloc takes the head */
		int32_t got = kv_pool_alloc(pool);
		if (m->n_free == 0)
			return got == -1;
		if (got != m->free_list[0])
			return 0;
		model_take(m, 0);
		m->extra[got]++;
		return 1;
	}
	}
}

static void test_random(void)
{
	kv_pool *pool = new_pool(2, 3, R_BT, R_BLOCKS);
	model m = { .n_free = R_BLOCKS };
	for (int i = 0; i < R_BLOCKS; i++)
		m.free_list[i] = i;
	kv_seq seq_store[R_SEQS], *seqs[R_SEQS];
	for (int i = 0; i < R_SEQS; i++) {
		kv_seq_init(&seq_store[i]);
		seqs[i] = &seq_store[i];
	}
	int bad_ops = 0, bad_checks = 0;
	err e = { "" };
	for (int op = 0; op < R_OPS; op++) {
		kv_seq *s = seqs[rnd(R_SEQS)];
		int ok;
		switch (rnd(6)) {
		case 0:
		case 1:
			ok = op_reserve(pool, &m, s);
			break;
		case 2: ok = op_truncate(pool, &m, s, rnd(R_BT * 12)); break;
		case 3: ok = op_truncate(pool, &m, s, 0); kv_seq_release(pool, s); break;
		case 4: ok = op_fork(pool, &m, s, seqs[rnd(R_SEQS)]); break;
		default: ok = op_extra(pool, &m); break;
		}
		bad_ops += !ok;
		if (!kv_pool_check(pool, (const kv_seq *const *)seqs, R_SEQS, m.extra, &e)) {
			if (bad_checks++ == 0)
				fprintf(stderr, "op %d: %s\n", op, e.msg);
		}
		bad_checks += kv_pool_n_free(pool) != m.n_free;
	}
	CHECK_EQ_INT(bad_ops, 0);
	CHECK_EQ_INT(bad_checks, 0);
	CHECK(n_reserve_full > 100); /* the pool did run dry at times */
	for (int i = 0; i < R_SEQS; i++)
		kv_seq_release(pool, seqs[i]);
	for (int32_t b = 0; b < R_BLOCKS; b++)
		while (m.extra[b]-- > 0)
			kv_pool_unref(pool, b);
	CHECK_EQ_INT(kv_pool_n_free(pool), R_BLOCKS);
	check_pool(pool, seqs, R_SEQS, NULL);
	kv_pool_free(pool);
}

int main(void)
{
	test_bad_params();
	test_byte_budget();
	test_alloc_order();
	test_refcounts();
	test_reserve();
	test_table_growth();
	test_truncate();
	test_slots_and_stats();
	test_copy_block();
	test_split();
	test_check_detects();
	test_random();
	return TEST_DONE();
}
