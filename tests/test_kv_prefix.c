/* tests/test_kv_prefix.c: the prefix cache (kv/prefix.h) over a small
 * host pool, without a model: chained keys, hits and misses, a lookup always
 * leaving a token to compute, token comparison on a hit, freed blocks that
 * stay findable until the pool hands them out again (least recently freed
 * first), pins that keep blocks out of reach of eviction, and the pool's
 * sequence helpers (push, share, copy-on-write), and the versions a cached
 * lookup relies on (whenever a lookup's answer changes, the prefix cache's or
 * the pool's version has). Invariants are checked after every operation. */
#include "kv/prefix.h"
#include "tests/test.h"

#include <string.h>

#define BT 4
#define NB 8

static kv_pool *new_pool(void)
{
	kv_pool_params pp = {.n_layers = 2, .kv_dim = 8, .block_tokens = BT, .n_blocks = NB};
	err e = {0};
	kv_pool *p = kv_pool_new(&pp, &e);
	CHECK_(p != NULL, "kv_pool_new: %s", e.msg);
	return p;
}

static void check_all(const kv_pool *pool, const kv_prefix *c, const kv_seq *const *seqs, int n,
		      const int32_t *extra)
{
	err e = {0};
	CHECK_(kv_pool_check(pool, seqs, n, extra, &e), "pool: %s", e.msg);
	CHECK_(kv_prefix_check(c, &e), "prefix: %s", e.msg);
}

static void fill(int32_t *t, int n, int base)
{
	for (int i = 0; i < n; i++)
		t[i] = base + i;
}

static void test_keys(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *a = kv_prefix_new(pool, 1);
	int32_t x[BT], y[BT];
	fill(x, BT, 10);
	fill(y, BT, 20);
	uint64_t r = kv_prefix_root(a);
	CHECK(kv_prefix_key(a, r, x) == kv_prefix_key(a, r, x));
	CHECK(kv_prefix_key(a, r, x) != kv_prefix_key(a, r, y));
	/* the same block after different prefixes has a different key */
	CHECK(kv_prefix_key(a, kv_prefix_key(a, r, x), y) != kv_prefix_key(a, kv_prefix_key(a, r, y), y));
	CHECK(kv_prefix_key(a, r, x) != kv_prefix_key(a, kv_prefix_key(a, r, x), x));
	/* a salted chain: plain keys before its block, its own from there on */
	kv_chain s = {99, 1}, t = {98, 1};
	CHECK(kv_prefix_chain_key(a, r, 0, x, &s) == kv_prefix_key(a, r, x));
	CHECK(kv_prefix_chain_key(a, r, 0, x, NULL) == kv_prefix_key(a, r, x));
	uint64_t k0 = kv_prefix_key(a, r, x);
	CHECK(kv_prefix_chain_key(a, k0, 1, y, &s) != kv_prefix_key(a, k0, y));
	CHECK(kv_prefix_chain_key(a, k0, 1, y, &s) != kv_prefix_chain_key(a, k0, 1, y, &t));
	CHECK(kv_prefix_chain_key(a, k0, 2, y, &s) == kv_prefix_key(a, k0, y)); /* mixed in once: later keys carry it through the chain */
	CHECK(kv_prefix_chain_key(a, k0, 1, y, &(kv_chain){0, 1}) == kv_prefix_key(a, k0, y));
	kv_prefix_free(a);
	kv_prefix *b = kv_prefix_new(pool, 2);
	kv_prefix *c = kv_prefix_new(pool, 1);
	CHECK(kv_prefix_root(b) != kv_prefix_root(c)); /* another model: other keys */
	kv_prefix_free(b);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

/* A sequence of n tokens with its KV "written" and its full blocks published. */
static void computed_seq(kv_pool *pool, kv_prefix *c, kv_seq *s, const int32_t *t, int n)
{
	kv_seq_init(s);
	CHECK(kv_seq_reserve(pool, s, n) == 0);
	s->n_tokens = n;
	int n_keyed = 0;
	uint64_t last = kv_prefix_root(c);
	kv_prefix_publish_table(c, s, t, n, &n_keyed, &last);
	CHECK_EQ_INT(n_keyed, n / BT);
}

static void test_hits_and_misses(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *c = kv_prefix_new(pool, 7);
	int32_t t[14], hits[NB];
	fill(t, 14, 100);
	kv_seq a;
	computed_seq(pool, c, &a, t, 14);
	const kv_seq *seqs[2] = {&a, NULL};
	check_all(pool, c, seqs, 1, NULL);
	int n_free;
	uint64_t last;
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 14, hits, &n_free, &last), 3);
	CHECK_EQ_INT(n_free, 0);
	CHECK(hits[0] == a.blocks[0] && hits[1] == a.blocks[1] && hits[2] == a.blocks[2]);
	/* a whole-block prompt: the last block is left to compute */
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 12, hits, &n_free, &last), 2);
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 13, hits, &n_free, &last), 3);
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 4, hits, &n_free, &last), 0);
	CHECK(last == kv_prefix_root(c));
	/* a miss in block 1 stops the walk there, even if block 2 matches */
	int32_t u[14];
	memcpy(u, t, sizeof u);
	u[5] = 999;
	CHECK_EQ_INT(kv_prefix_lookup(c, u, 14, hits, &n_free, &last), 1);
	/* the right key with other tokens is no hit (no reuse on a collision) */
	uint64_t k0 = kv_prefix_key(c, kv_prefix_root(c), t);
	CHECK(kv_prefix_find(c, k0, t) == a.blocks[0]);
	CHECK(kv_prefix_find(c, k0, u + 4) == -1);
	/* a second block under the same key is not published */
	kv_seq b;
	computed_seq(pool, c, &b, u, 4);
	CHECK(!kv_prefix_publish(c, b.blocks[0], k0, t));
	CHECK(!kv_prefix_has_key(c, b.blocks[0]) || b.blocks[0] == a.blocks[0]);
	seqs[1] = &b;
	check_all(pool, c, seqs, 2, NULL);
	/* taking hits in use shares them */
	int n = kv_prefix_lookup(c, t, 14, hits, &n_free, &last);
	kv_seq d;
	kv_seq_init(&d);
	for (int i = 0; i < n; i++) {
		kv_prefix_take(c, hits[i]);
		kv_seq_push(pool, &d, hits[i]);
	}
	CHECK_EQ_INT(kv_pool_refcount(pool, a.blocks[0]), 2);
	const kv_seq *three[3] = {&a, &b, &d};
	check_all(pool, c, three, 3, NULL);
	kv_seq_release(pool, &d);
	kv_seq_release(pool, &b);
	kv_seq_release(pool, &a);
	check_all(pool, c, NULL, 0, NULL);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

static void test_lru_eviction(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *c = kv_prefix_new(pool, 7);
	int32_t t[14], hits[NB];
	fill(t, 14, 300);
	kv_seq a;
	computed_seq(pool, c, &a, t, 14);  /* 4 blocks: 3 keyed, 4 never used stay free */
	int32_t first = a.blocks[0];
	kv_seq_release(pool, &a);
	CHECK_EQ_INT(kv_prefix_n_cached(c), 3);
	int n_free;
	uint64_t last;
	/* freed but findable: hits that sit on the free list */
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 14, hits, &n_free, &last), 3);
	CHECK_EQ_INT(n_free, 3);
	/* new contents take the least recently freed blocks first: the 4 unused
	 * ones, then the sequence's last block (freed first, never keyed), then
	 * its keyed blocks from the last to the first */
	kv_seq b;
	kv_seq_init(&b);
	CHECK(kv_seq_reserve(pool, &b, 5 * BT) == 0);
	const kv_seq *seqs[1] = {&b};
	check_all(pool, c, seqs, 1, NULL);
	CHECK_EQ_INT(kv_prefix_n_cached(c), 3);
	CHECK(kv_seq_reserve(pool, &b, 6 * BT) == 0);
	CHECK_EQ_INT(kv_prefix_n_cached(c), 2);
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 14, hits, &n_free, &last), 2);
	CHECK(kv_seq_reserve(pool, &b, 7 * BT) == 0);
	CHECK_EQ_INT(kv_prefix_n_cached(c), 1);
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 14, hits, &n_free, &last), 1);
	CHECK(hits[0] == first);
	CHECK(kv_seq_reserve(pool, &b, 8 * BT) == 0);
	CHECK_EQ_INT(kv_prefix_n_cached(c), 0);
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 14, hits, &n_free, &last), 0);
	check_all(pool, c, seqs, 1, NULL);
	kv_seq_release(pool, &b);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

static void test_pins(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *c = kv_prefix_new(pool, 7);
	int32_t t[9], hits[NB], extra[NB] = {0};
	fill(t, 9, 500);
	kv_seq a;
	computed_seq(pool, c, &a, t, 9);   /* blocks 0, 1 keyed */
	int32_t pinned = a.blocks[0];
	kv_pool_ref(pool, pinned);         /* a pin holds its own reference */
	extra[pinned] = 1;
	kv_seq_release(pool, &a);
	check_all(pool, c, NULL, 0, extra);
	kv_seq b;
	kv_seq_init(&b);
	/* every free block goes to new contents: the pinned one cannot */
	CHECK(kv_seq_reserve(pool, &b, (NB - 1) * BT) == 0);
	CHECK(kv_seq_reserve(pool, &b, NB * BT) == -1);
	int n_free;
	uint64_t last;
	CHECK_EQ_INT(kv_prefix_lookup(c, t, 9, hits, &n_free, &last), 1);
	CHECK(hits[0] == pinned && n_free == 0);
	const kv_seq *seqs[1] = {&b};
	check_all(pool, c, seqs, 1, extra);
	kv_seq_release(pool, &b);
	kv_pool_unref(pool, pinned);
	check_all(pool, c, NULL, 0, NULL);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

static void test_share_and_own(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *c = kv_prefix_new(pool, 7);
	int32_t t[10];
	fill(t, 10, 700);
	kv_seq a, b;
	computed_seq(pool, c, &a, t, 10);  /* 3 blocks, the last partial */
	kv_seq_init(&b);
	kv_seq_share(pool, &b, &a);
	CHECK_EQ_INT(b.n_blocks, 3);
	CHECK_EQ_INT(b.n_tokens, 10);
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(kv_pool_refcount(pool, a.blocks[i]), 2);
	const kv_seq *seqs[2] = {&a, &b};
	check_all(pool, c, seqs, 2, NULL);
	/* b writes position 10: its partial block is copied first */
	int32_t old = b.blocks[2];
	CHECK(kv_seq_own(pool, &b, 10) == 0);
	CHECK(b.blocks[2] != old && a.blocks[2] == old);
	CHECK_EQ_INT(kv_pool_refcount(pool, old), 1);
	CHECK_EQ_INT(kv_pool_refcount(pool, b.blocks[2]), 1);
	CHECK(b.blocks[0] == a.blocks[0]);
	check_all(pool, c, seqs, 2, NULL);
	/* a private block or a position past the table: nothing to do */
	CHECK(kv_seq_own(pool, &b, 9) == 0);
	CHECK(kv_seq_own(pool, &b, 40) == 0);
	/* no free block: the copy fails and nothing changes */
	kv_seq f;
	kv_seq_init(&f);
	CHECK(kv_seq_reserve(pool, &f, kv_pool_n_free(pool) * BT) == 0);
	CHECK(kv_seq_own(pool, &b, 0) == -1);
	CHECK(b.blocks[0] == a.blocks[0]);
	const kv_seq *all[3] = {&a, &b, &f};
	check_all(pool, c, all, 3, NULL);
	kv_seq_release(pool, &f);
	kv_seq_release(pool, &b);
	kv_seq_release(pool, &a);
	check_all(pool, c, NULL, 0, NULL);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

/* What a lookup of t[n] answers, as one comparable record. */
typedef struct answer {
	int n, n_free;
	uint64_t last;
	int32_t hits[NB];
} answer;

static answer look(const kv_prefix *c, const int32_t *t, int n)
{
	answer a = {0};
	a.n = kv_prefix_lookup(c, t, n, a.hits, &a.n_free, &a.last);
	return a;
}

/* Random sequences come and go over three prompts that share prefixes, in
 * a pool too small for all of them (so cached blocks are handed out again).
 * After every operation, each prompt's lookup either answers as before or
 * one of the versions moved; a lookup itself moves neither. */
static void test_versions(void)
{
	kv_pool *pool = new_pool();
	kv_prefix *c = kv_prefix_new(pool, 7);
	int32_t t[3][14];
	for (int k = 0; k < 3; k++) {
		fill(t[k], 14, 100);
		for (int i = 4 * k + 4; i < 14; i++)
			t[k][i] += 50 * (k + 1);
	}
	kv_seq live[4] = {0};
	int state[4] = {0};      /* 0: none, 1: blocks taken, 2: published */
	int prompt[4] = {0}, n_keyed[4] = {0};
	uint64_t last[4] = {0};
	answer before[3];
	for (int k = 0; k < 3; k++)
		before[k] = look(c, t[k], 14);
	uint64_t v = kv_prefix_version(c) + kv_pool_version(pool);
	int changed = 0;
	uint32_t rng = 12345;
	for (int op = 0; op < 600; op++) {
		rng = rng * 1103515245u + 12345u;
		int i = (int)(rng >> 16) % 4, k = (int)(rng >> 20) % 3;
		if (state[i] == 1) {         /* its K/V written: publish */
			kv_prefix_publish_table(c, &live[i], t[prompt[i]], 14, &n_keyed[i], &last[i]);
			state[i] = 2;
		} else if (state[i] == 2) {  /* finished */
			kv_seq_release(pool, &live[i]);
			state[i] = 0;
		} else {                     /* admitted: hits taken, the rest allocated */
			answer a = look(c, t[k], 14);
			kv_seq_init(&live[i]);
			for (int j = 0; j < a.n; j++) {
				kv_prefix_take(c, a.hits[j]);
				kv_seq_push(pool, &live[i], a.hits[j]);
			}
			if (kv_seq_reserve(pool, &live[i], 14)) {
				kv_seq_release(pool, &live[i]);
			} else {
				state[i] = 1;
				prompt[i] = k;
				n_keyed[i] = a.n;
				last[i] = a.last;
			}
		}
		uint64_t now = kv_prefix_version(c) + kv_pool_version(pool);
		for (int j = 0; j < 3; j++) {
			answer a = look(c, t[j], 14);
			bool same = !memcmp(&a, &before[j], sizeof a);
			changed += !same;
			CHECK_(same || now != v, "op %d: prompt %d's lookup changed, no version did", op, j);
			before[j] = a;
		}
		CHECK(kv_prefix_version(c) + kv_pool_version(pool) == now);
		v = now;
	}
	CHECK_(changed > 100, "only %d lookups changed", changed);
	for (int i = 0; i < 4; i++)
		if (state[i])
			kv_seq_release(pool, &live[i]);
	check_all(pool, c, NULL, 0, NULL);
	kv_prefix_free(c);
	kv_pool_free(pool);
}

int main(void)
{
	test_keys();
	test_hits_and_misses();
	test_lru_eviction();
	test_pins();
	test_share_and_own();
	test_versions();
	return TEST_DONE();
}
