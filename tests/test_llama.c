/* tests/test_llama.c: the forward pass against llama.cpp's reference outputs
 * (../shared/testdata), batch invariance and chunked prefill, and model-load
 * errors. */
#include "engine/gen.h"
#include "kv/pool.h"
#include "engine/sample.h"
#include "models/llama.h"
#include "tests/test.h"
#include "tests/tsv.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define MODEL "../shared/models/stories260K.gguf"
#define RAND256 "build/models/rand-256x4-f32.gguf"
#define RAND256Q4K "build/models/rand-256x4-q4_k.gguf"
#define MAX_IDS 1024

static float max_abs_diff(const float *a, const float *b, int n)
{
	float d = 0;
	for (int i = 0; i < n; i++)
		d = MAX(d, fabsf(a[i] - b[i]));
	return d;
}

/* logits.tsv-style table: ids in column id_col, logits in the next. */
static void check_logits_table(const char *model_path, const char *table, int id_col)
{
	err e = {0};
	llama_model *m = llama_open(model_path, NULL, &e);
	CHECK_(m != NULL, "open %s: %s", model_path, e.msg);
	tsv t;
	CHECK(tsv_load(&t, table) == 0);
	if (!m || !t.buf)
		return;
	int nv = llama_hp(m)->n_vocab;
	float *ref = xmalloc((size_t)nv * sizeof *ref), *got = xmalloc((size_t)nv * sizeof *got);
	float *chunked = xmalloc((size_t)nv * sizeof *chunked);
	for (int r = 0; r < t.n_rows; r++) {
		int32_t ids[MAX_IDS];
		int n = tsv_ints(t.rows[r][id_col], ids, MAX_IDS);
		CHECK_EQ_INT(tsv_floats(t.rows[r][id_col + 1], ref, nv), nv);
		CHECK(gen_logits(m, ids, n, 0, got, &e) == 0);
		float d = max_abs_diff(got, ref, nv);
		CHECK_(d <= 1e-3f, "%s row %d: max abs diff %g > 1e-3", table, r, d);
		CHECK_EQ_INT(samp_argmax(got, nv), samp_argmax(ref, nv));
		/* the same prompt fed in chunks gives the same logits, bit for bit */
		for (int chunk = 1; chunk <= 3; chunk++) {
			CHECK(gen_logits(m, ids, n, chunk, chunked, &e) == 0);
			CHECK_(!memcmp(chunked, got, (size_t)nv * sizeof *got),
			       "%s row %d: chunk %d differs from whole prompt (max %g)", table, r, chunk,
			       max_abs_diff(chunked, got, nv));
		}
	}
	free(ref);
	free(got);
	free(chunked);
	tsv_free(&t);
	llama_free(m);
}

static bool collect(void *ctx, int32_t id)
{
	int32_t *out = ctx;
	out[++out[0]] = id;
	return false;
}

/* Greedy continuations alone, against greedy.tsv. */
static void test_greedy_reference(llama_model *m)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/greedy.tsv") == 0);
	for (int r = 0; r < t.n_rows; r++) {
		int32_t prompt[MAX_IDS], want[MAX_IDS], got[MAX_IDS + 1] = {0};
		int n = tsv_ints(t.rows[r][1], prompt, MAX_IDS);
		int n_want = tsv_ints(t.rows[r][2], want, MAX_IDS);
		gen_params gp = {.samp = samp_default_params(), .n_predict = n_want, .n_ctx = 512,
				 .block_tokens = 16};
		gp.samp.temp = 0;
		gen_stats st;
		err e = {0};
		CHECK(gen_run(m, NULL, prompt, n, &gp, collect, got, &st, &e) == 0);
		CHECK_EQ_INT(got[0], n_want);
		int first_diff = -1;
		for (int i = 0; i < n_want && first_diff < 0; i++)
			if (got[1 + i] != want[i])
				first_diff = i;
		CHECK_(first_diff < 0, "greedy row %d differs at token %d", r, first_diff);
	}
	tsv_free(&t);
}

/* Several sequences in one pool, stepped together: each seq joins at step
 * join[s] (prefilled in chunks of chunk[s] tokens while the others decode),
 * then decodes greedily. The tokens must equal the reference continuation. */
#define N_SEQ 3
static void test_batch_invariance(llama_model *m, int block_tokens, const int *join, const int *chunk)
{
	tsv t;
	CHECK(tsv_load(&t, "../shared/testdata/greedy.tsv") == 0);
	CHECK(t.n_rows >= N_SEQ);
	int nv = llama_hp(m)->n_vocab, n_gen = 24;
	int32_t prompt[N_SEQ][MAX_IDS], want[N_SEQ][MAX_IDS], got[N_SEQ][64];
	int n_prompt[N_SEQ], n_got[N_SEQ] = {0}, done_prefill[N_SEQ] = {0};
	for (int s = 0; s < N_SEQ; s++) {
		n_prompt[s] = tsv_ints(t.rows[s][1], prompt[s], MAX_IDS);
		tsv_ints(t.rows[s][2], want[s], MAX_IDS);
	}
	const llama_hparams *hp = llama_hp(m);
	err e = {0};
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .block_tokens = block_tokens, .n_blocks = 256};
	kv_pool *pool = kv_pool_new(&pp, &e);
	kv_seq seqs[N_SEQ];
	const kv_seq *seq_ptrs[N_SEQ];
	for (int s = 0; s < N_SEQ; s++)
		kv_seq_init(&seqs[s]), seq_ptrs[s] = &seqs[s];
	float *logits = xmalloc((size_t)N_SEQ * nv * sizeof *logits);
	for (int step = 0; step < 200; step++) {
		int32_t tok[64], pos[64], seq_of[64], out_rows[N_SEQ], out_seq[N_SEQ];
		int64_t slot[64];
		int n = 0, n_out = 0;
		for (int s = 0; s < N_SEQ; s++) {
			if (step < join[s] || n_got[s] >= n_gen)
				continue;
			int take = done_prefill[s] < n_prompt[s] ? MIN(chunk[s], n_prompt[s] - done_prefill[s]) : 1;
			int64_t base = seqs[s].n_tokens;
			CHECK(kv_seq_reserve(pool, &seqs[s], base + take) == 0);
			for (int i = 0; i < take; i++, n++) {
				bool pre = done_prefill[s] < n_prompt[s];
				tok[n] = pre ? prompt[s][done_prefill[s] + i] : got[s][n_got[s] - 1];
				pos[n] = (int32_t)(base + i);
				slot[n] = kv_seq_slot(pool, &seqs[s], base + i);
				seq_of[n] = s;
			}
			if (done_prefill[s] < n_prompt[s])
				done_prefill[s] += take;
			seqs[s].n_tokens = base + take;
			if (done_prefill[s] == n_prompt[s]) {
				out_rows[n_out] = n - 1;
				out_seq[n_out++] = s;
			}
		}
		if (n == 0)
			break;
		const int32_t *tables[N_SEQ];
		int32_t n_table[N_SEQ];
		for (int s = 0; s < N_SEQ; s++)
			tables[s] = seqs[s].blocks, n_table[s] = seqs[s].n_blocks;
		llama_batch b = {.n_tokens = n, .token = tok, .pos = pos, .slot = slot, .seq = seq_of,
				 .n_seqs = N_SEQ, .block_table = tables, .n_table = n_table,
				 .n_out = n_out, .out_rows = out_rows};
		kv_view kv = kv_pool_view(pool);
		CHECK(llama_forward(m, &b, &kv, logits, &e) == 0);
		for (int i = 0; i < n_out; i++) {
			int s = out_seq[i];
			got[s][n_got[s]++] = samp_argmax(logits + (size_t)i * nv, nv);
		}
		CHECK_(kv_pool_check(pool, seq_ptrs, N_SEQ, NULL, &e), "pool check: %s", e.msg);
	}
	for (int s = 0; s < N_SEQ; s++) {
		CHECK_EQ_INT(n_got[s], n_gen);
		for (int i = 0; i < n_gen; i++)
			if (got[s][i] != want[s][i]) {
				CHECK_(0, "batched seq %d differs at token %d (%d vs %d)", s, i, got[s][i],
				       want[s][i]);
				break;
			}
		kv_seq_release(pool, &seqs[s]);
	}
	CHECK_EQ_INT(kv_pool_n_free(pool), 256);
	free(logits);
	kv_pool_free(pool);
	tsv_free(&t);
}

static void test_bad_batches(llama_model *m)
{
	err e = {0};
	const llama_hparams *hp = llama_hp(m);
	kv_pool_params pp = {.n_layers = hp->n_layers, .kv_dim = hp->n_kv_heads * hp->head_dim,
			     .block_tokens = 16, .n_blocks = 2};
	kv_pool *pool = kv_pool_new(&pp, &e);
	kv_view kv = kv_pool_view(pool);
	int32_t table0[1] = {0}, n_table = 1, tokv = 5, pos = 0, seq = 0, row = 0;
	const int32_t *tables[1] = {table0};
	int64_t slot = 0;
	float *logits = xmalloc((size_t)hp->n_vocab * sizeof *logits);
	llama_batch b = {.n_tokens = 1, .token = &tokv, .pos = &pos, .slot = &slot, .seq = &seq,
			 .n_seqs = 1, .block_table = tables, .n_table = &n_table, .n_out = 1,
			 .out_rows = &row};
	CHECK(llama_forward(m, &b, &kv, logits, &e) == 0);
	tokv = hp->n_vocab;
	CHECK(llama_forward(m, &b, &kv, logits, &e) == -1 && strstr(e.msg, "token id"));
	tokv = 5;
	pos = 16; /* past the one-block table */
	CHECK(llama_forward(m, &b, &kv, logits, &e) == -1 && strstr(e.msg, "out of range"));
	pos = 0;
	slot = 99;
	CHECK(llama_forward(m, &b, &kv, logits, &e) == -1);
	free(logits);
	kv_pool_free(pool);
}

/* Loads the model bytes, overwrites the bytes `skip` past the first match of
 * find with repl, and expects an error containing want. */
static void expect_load_error(const char *find, size_t skip, const char *repl, const char *want)
{
	FILE *fp = fopen(MODEL, "rb");
	CHECK(fp != NULL);
	if (!fp)
		return;
	fseek(fp, 0, SEEK_END);
	size_t n = (size_t)ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *buf = xmalloc(n);
	CHECK(fread(buf, 1, n, fp) == n);
	fclose(fp);
	char *at = memmem(buf, n, find, strlen(find));
	CHECK(at != NULL);
	if (at)
		memcpy(at + skip, repl, strlen(repl));
	err e = {0};
	gguf_file *f = gguf_open_mem(buf, n, "edited.gguf", &e);
	llama_model *m = f ? llama_from_gguf(f, NULL, &e) : NULL;
	CHECK_(m == NULL && strstr(e.msg, want), "edit '%s': error '%s' lacks '%s'", find, e.msg, want);
	llama_free(m);
	free(buf);
}

/* A mapped model over 2 MiB starts at a 2 MiB boundary (so its page cache's
 * huge folios can be mapped whole), and the count of its bytes in huge
 * pages is a readable part of the file. */
static void test_map_alignment(void)
{
	err e = {0};
	gguf_file *f = gguf_open(RAND256, &e);
	CHECK_(f != NULL, "%s", e.msg);
	if (!f)
		return;
	const gguf_tensor *t = gguf_tensor_at(f, 0);
	uint64_t data_off = gguf_file_bytes(f) - gguf_data_bytes(f);
	uintptr_t base = (uintptr_t)t->data - t->offset - data_off;
	CHECK_(gguf_file_bytes(f) > (2u << 20) && base % (2u << 20) == 0, "map at %#lx", (unsigned long)base);
	/* every byte still reads as the file has it: the last tensor's last byte */
	const gguf_tensor *l = gguf_tensor_at(f, gguf_n_tensors(f) - 1);
	FILE *fp = fopen(RAND256, "rb");
	CHECK(fp && fseek(fp, (long)(data_off + l->offset + (uint64_t)l->n_bytes - 1), SEEK_SET) == 0 &&
	      fgetc(fp) == ((const uint8_t *)l->data)[l->n_bytes - 1]);
	if (fp)
		fclose(fp);
	/* the same for zeroed memory (the KV pool's): aligned, zero, writable */
	size_t n = (3u << 20) + 100;
	uint8_t *z = zalloc_huge(n);
	CHECK(z && (uintptr_t)z % (2u << 20) == 0);
	if (z) {
		bool zero = true;
		for (size_t i = 0; i < n; i += 4096)
			zero = zero && z[i] == 0;
		z[n - 1] = 7;
		CHECK(zero && z[n - 1] == 7 && z[0] == 0);
	}
	huge_free(z, n);
	int64_t huge = gguf_huge_mapped_bytes(f);
	CHECK_(huge >= 0 && huge <= (int64_t)gguf_file_bytes(f) + (2 << 20), "%lld", (long long)huge);
	gguf_close(f);
}

/* The logits of ids on path under the CPU kernel set isa ("auto": the best). */
static bool logits_under(const char *path, const char *isa, const int32_t *ids, int n, float *out,
			 int64_t *packed, int64_t *resident, int64_t *released_max)
{
	err e = {0};
	CHECK_(kern_cpu_set_isa(isa, &e) == 0, "%s", e.msg);
	llama_model *m = llama_open(path, NULL, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (!m)
		return false;
	const gguf_file *f = llama_file(m);
	*packed = llama_packed_bytes(m);
	*resident = gguf_resident_bytes(f);
	/* what may stay: everything but the packed tensors, and their partial pages */
	*released_max = (int64_t)gguf_file_bytes(f) - *packed + gguf_n_tensors(f) * 2 * 4096;
	CHECK_(gen_logits(m, ids, n, 0, out, &e) == 0, "%s", e.msg);
	/* every tensor still reads as the file has it, the let-go ones paged back in */
	int fd = open(path, O_RDONLY);
	uint64_t data_off = gguf_file_bytes(f) - gguf_data_bytes(f);
	bool same = fd >= 0;
	for (int64_t i = 0; same && i < gguf_n_tensors(f); i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		uint8_t *buf = xmalloc((size_t)t->n_bytes);
		same = pread(fd, buf, (size_t)t->n_bytes, (off_t)(data_off + t->offset)) == t->n_bytes &&
		       !memcmp(buf, t->data, (size_t)t->n_bytes);
		free(buf);
	}
	CHECK_(same, "%s: the mapped tensors read as the file (isa %s)", path, isa);
	if (fd >= 0)
		close(fd);
	llama_free(m);
	CHECK(kern_cpu_set_isa("auto", &e) == 0);
	return true;
}

/* Matrices the CPU packs are resident once: their file pages go after
 * packing. The logits equal the scalar kernels' on the stored rows. */
static void test_packed_release(void)
{
	int32_t ids[] = {1, 403, 261, 306, 137, 375, 29};
	enum { NV = 512 };
	float ref[NV], got[NV];
	int64_t packed = 0, resident = 0, most = 0, p0, r0, m0;
	if (!logits_under(RAND256Q4K, "scalar", ids, (int)ARRAY_LEN(ids), ref, &p0, &r0, &m0) ||
	    !logits_under(RAND256Q4K, "auto", ids, (int)ARRAY_LEN(ids), got, &packed, &resident, &most))
		return;
	CHECK_EQ_INT(p0, 0); /* the scalar set keeps no layout of its own */
	bool packs = strcmp(kern_cpu_isa(), "scalar") != 0;
	CHECK_(!packs || packed > 0, "the %s kernels pack the Q4_K matrices", kern_cpu_isa());
	CHECK_(resident <= most, "resident %lld bytes of the file after packing %lld (at most %lld)",
	       (long long)resident, (long long)packed, (long long)most);
	float d = max_abs_diff(got, ref, NV);
	CHECK_(d <= 1e-3f, "packed %s vs scalar logits: max abs diff %g", kern_cpu_isa(), d);
	CHECK_EQ_INT(samp_argmax(got, NV), samp_argmax(ref, NV));
}

int main(void)
{
	test_map_alignment();
	test_packed_release();
	check_logits_table(MODEL, "../shared/testdata/logits.tsv", 1);
	check_logits_table(RAND256, "../shared/testdata/logits_rand256.tsv", 2);

	err e = {0};
	llama_model *m = llama_open(MODEL, &(llama_params){.max_tokens = 64}, &e);
	CHECK_(m != NULL, "%s", e.msg);
	if (m) {
		test_greedy_reference(m);
		test_batch_invariance(m, 16, (int[]){0, 0, 0}, (int[]){64, 64, 64});
		test_batch_invariance(m, 4, (int[]){0, 3, 7}, (int[]){2, 5, 1});
		test_batch_invariance(m, 1, (int[]){5, 0, 2}, (int[]){3, 64, 4});
		test_bad_batches(m);
	}
	llama_free(m);

	expect_load_error("blk.2.ffn_up.weight", 0, "blk.2.ffn_uq.weight", "blk.2.ffn_up.weight");
	expect_load_error("output_norm.weight", 0, "output_norm.wxight", "output_norm.weight");
	/* the value after the key, its u32 type and u64 length */
	expect_load_error("general.architecture", 20 + 4 + 8, "llamb", "architecture 'llamb'");
	expect_load_error("llama.embedding_length", 0, "llama.embedding_lengtX", "embedding_length");
	CHECK(llama_open("no/such/model.gguf", NULL, &e) == NULL && strstr(e.msg, "no/such/model.gguf"));
	/* a backend whose attention stops short of the model's heads (8 here)
	 * refuses it at load, naming the limit */
	kern_ops narrow = *kern_cpu();
	narrow.max_head_dim = 4;
	e = (err){0};
	m = llama_open(MODEL, &(llama_params){.max_tokens = 8, .kern = &narrow}, &e);
	CHECK_(m == NULL && strstr(e.msg, "head_dim 8") && strstr(e.msg, "up to 4"), "%s", e.msg);
	llama_free(m);
	return TEST_DONE();
}
