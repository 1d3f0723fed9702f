/* tests/fuzz/fuzz_gguf.c: the GGUF reader on arbitrary bytes.
 *
 * The input is a whole file for gguf_open_mem(). When it opens, every view
 * the reader hands out (keys, strings, array items, tensor data) must lie
 * inside the input, every typed getter must answer without crashing, and the
 * metadata goes on to the tokenizer (tok_new) and the chat-template
 * detection, which must either succeed or fail with a message. */
#include "tests/fuzz/fuzz.h"

#include "models/gguf.h"
#include "models/tmpl.h"
#include "models/tok.h"

static const uint8_t *in_lo, *in_hi;

static bool inside(const void *p, uint64_t n)
{
	const uint8_t *q = p;
	return q >= in_lo && q <= in_hi && n <= (uint64_t)(in_hi - q);
}

static void check_array(const gguf_arr *a)
{
	FUZZ_CHECK(a->type != GGUF_ARR && a->type < GGUF_VTYPE_COUNT);
	for (uint64_t i = 0; i < a->n; i++) {
		if (a->type == GGUF_STR) {
			gguf_str s = gguf_arr_str(a, i);
			FUZZ_CHECK(inside(s.p, s.len));
		} else if (a->type == GGUF_F32 || a->type == GGUF_F64) {
			(void)gguf_arr_f32(a, i);
		} else {
			(void)gguf_arr_int(a, i);
		}
	}
}

/* Every getter on every key: the one that fits succeeds, the rest fail with
 * a message (except integers out of a getter's range). */
static void check_kv(const gguf_file *f, int64_t i)
{
	gguf_str k = gguf_kv_key(f, i);
	FUZZ_CHECK(inside(k.p, k.len));
	enum gguf_vtype t = gguf_kv_type(f, i);
	FUZZ_CHECK(t < GGUF_VTYPE_COUNT);
	(void)gguf_vtype_name(t);
	char *key = fuzz_copy(k.p, k.len, true);
	if (strlen(key) != k.len) {          /* a NUL inside: not findable by name */
		free(key);
		return;
	}
	FUZZ_CHECK(gguf_find_key(f, key) == i);
	err e = {0};
	uint32_t u32;
	int64_t i64;
	float f32;
	bool b;
	gguf_str s;
	gguf_arr a;
	if (gguf_get_str(f, key, &s, &e) == 0) {
		FUZZ_CHECK(t == GGUF_STR && inside(s.p, s.len));
	} else {
		FUZZ_CHECK(t != GGUF_STR && e.msg[0]);
	}
	e.msg[0] = '\0';
	if (gguf_get_arr(f, key, &a, &e) == 0)
		check_array(&a);
	else
		FUZZ_CHECK(t != GGUF_ARR && e.msg[0]);
	(void)gguf_get_u32(f, key, &u32, &e);
	(void)gguf_get_i64(f, key, &i64, &e);
	(void)gguf_get_f32(f, key, &f32, &e);
	(void)gguf_get_bool(f, key, &b, &e);
	(void)gguf_opt_u32(f, key, &u32, &e);
	(void)gguf_opt_f32(f, key, &f32, &e);
	(void)gguf_opt_bool(f, key, &b, &e);
	(void)gguf_opt_str(f, key, &s, &e);
	free(key);
}

static void check_tensors(const gguf_file *f)
{
	int64_t n = gguf_n_tensors(f);
	FUZZ_CHECK(n >= 0);
	for (int64_t i = 0; i < n; i++) {
		const gguf_tensor *t = gguf_tensor_at(f, i);
		FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4 && t->n_bytes >= 0 && t->n_elems >= 0);
		FUZZ_CHECK(inside(t->data, (uint64_t)t->n_bytes));
		FUZZ_CHECK(t->offset % gguf_alignment(f) == 0);
		if (t->n_bytes > 0) {    /* ASan checks these reads */
			volatile uint8_t first = ((const uint8_t *)t->data)[0];
			volatile uint8_t last = ((const uint8_t *)t->data)[t->n_bytes - 1];
			(void)first, (void)last;
		}
		FUZZ_CHECK(gguf_find_tensor(f, t->name) == t);   /* names are unique */
	}
	FUZZ_CHECK(gguf_find_tensor(f, "no such tensor \x01") == NULL);
}

/* The metadata as the tokenizer and the template detection read it. */
static void check_consumers(const gguf_file *f)
{
	err e = {0};
	enum tmpl_family fam;
	if (tmpl_from_gguf(f, &fam, &e) == 0)
		FUZZ_CHECK(fam < TMPL_COUNT);
	else
		FUZZ_CHECK(e.msg[0]);
	e.msg[0] = '\0';
	tok *t = tok_new(f, &e);
	if (!t) {
		FUZZ_CHECK(e.msg[0]);
		return;
	}
	static const char text[] = "Hello world! <s> 123\n\xe2\x96\x81x \xff";
	int32_t ids[64];
	int n = tok_encode(t, text, sizeof text - 1, TOK_ADD_BOS | TOK_PARSE_SPECIAL, ids, 64);
	FUZZ_CHECK(n >= 0);
	char out[1024];
	if (n >= 0 && n <= 64)
		FUZZ_CHECK(tok_detokenize(t, ids, n, true, out, sizeof out) >= 0);
	tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	err e = {0};
	in_lo = data;
	in_hi = data + size;
	gguf_file *f = gguf_open_mem(data, size, "fuzz.gguf", &e);
	if (!f) {
		FUZZ_CHECK(strncmp(e.msg, "fuzz.gguf: ", 11) == 0);
		return 0;
	}
	FUZZ_CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
	FUZZ_CHECK(gguf_file_bytes(f) == size);
	FUZZ_CHECK(gguf_data_bytes(f) <= size);
	for (int64_t i = 0; i < gguf_n_kv(f); i++)
		check_kv(f, i);
	check_tensors(f);
	check_consumers(f);
	gguf_close(f);
	return 0;
}
