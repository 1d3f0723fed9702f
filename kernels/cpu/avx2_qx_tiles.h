/* kernels/cpu/avx2_qx_tiles.h: the tiles of kernels/cpu/avx2_qx.c, included
 * there once per integer route (not a header of its own): QX_V 0 forms the
 * integer sums with vpmaddubsw (AVX2), 1 with vpdpbusd (AVX-512 VNNI); QI
 * and QN are the route's inline and noinline attributes (its target), QX(n)
 * its names, QX_TC its most tokens per tile. A tile runs C tokens from t0
 * over one packed group's blocks [b0, b0 + nb) (qtile), every output the
 * scalar chain: the block's exact integer sum, then its f32 step. */

/* ---- 32-value formats: q4_1, q5_0, q5_1, iq4_nl ---- */

/* The integer sum of one block for one token, rows in lanes: u[0..3] the
 * values at 4j.. (low nibbles), u[4..7] at 16 + 4j.. (high); ua their
 * magnitudes (iq4_nl on the AVX2 route). Before the format's correction. */
#if QX_V
QI __m256i QX(dot32)(const __m256i *u, const __m256i *ua, const int8_t *x, const enum dtype T)
{
	(void)ua, (void)T;
	__m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int j = 0; j < 4; j++) {
		s0 = _mm256_dpbusd_epi32(s0, u[j], bcast32(x + 4 * j));
		s1 = _mm256_dpbusd_epi32(s1, u[4 + j], bcast32(x + 16 + 4 * j));
	}
	return _mm256_add_epi32(s0, s1);
}
#else
QI __m256i QX(dot32)(const __m256i *u, const __m256i *ua, const int8_t *x, const enum dtype T)
{
	const __m256i one = _mm256_set1_epi16(1);
	if (T == DT_IQ4_NL) { /* |t| by x with t's sign: pairs up to 32258, widened one by one */
		__m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int i = 0; i < 8; i++) {
			__m256i xv = bcast32(x + (i < 4 ? 4 * i : 16 + 4 * (i - 4)));
			s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(ua[i], _mm256_sign_epi8(xv, u[i])), one));
		}
		return s;
	}
	/* q4_1: 8 vectors of pairs up to 2 x 15 x 127 in 16 bits; q5: 4 of 2 x 31 x 127 */
	const int L = T == DT_Q4_1 ? 8 : 4;
	__m256i s = _mm256_setzero_si256(), p = _mm256_setzero_si256();
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		__m256i q = _mm256_maddubs_epi16(u[i], bcast32(x + (i < 4 ? 4 * i : 16 + 4 * (i - 4))));
		p = i % L ? _mm256_add_epi16(p, q) : q;
		if (i % L == L - 1)
			s = _mm256_add_epi32(s, _mm256_madd_epi16(p, one));
	}
	return s;
}
#endif

QI void QX(t32)(const mm_args *a, const qtile *g, int64_t t0, const int C, const enum dtype T)
{
	const bool q5 = T == DT_Q5_0 || T == DT_Q5_1, mo = T == DT_Q4_1 || T == DT_Q5_1, nl = T == DT_IQ4_NL;
	const int PB = T == DT_Q4_1 ? 160 : T == DT_Q5_0 ? 176 : T == DT_Q5_1 ? 192 : 144, DO = q5 ? 160 : 128;
	const int8_t *xq[QX_TC];
	const float *xd[QX_TC], *xs[QX_TC];
	const int32_t *xn[QX_TC];
	__m256 acc[QX_TC];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(T, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 32 * g->b0;
		xd[c] = v.d + g->b0;
		xn[c] = v.ns + g->b0;
		xs[c] = mo ? act_sums(a, t0 + c) + g->b0 : NULL;
		acc[c] = acc_begin(a, g, t0 + c);
	}
	const __m256i m4 = _mm256_set1_epi8(15), m10 = _mm256_set1_epi8(0x10), tab = iq4_table(QX_V ? 128 : 0);
	for (int64_t b = 0; b < g->nb; b++) {
		const uint8_t *e = g->e + b * PB;
		const __m256i ph = q5 ? ld(e + 128) : _mm256_setzero_si256();
		__m256i u[8], ua[8];
#pragma GCC unroll 4
		for (int j = 0; j < 4; j++) {
			__m256i raw = ld(e + 32 * j);
			pf_part(e + g->pfd, PB, j, 4, raw);
			__m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
			if (q5) { /* bit j of a byte: value 4j + b; bit 4 + j: value 16 + 4j + b */
				lo = _mm256_or_si256(lo, _mm256_and_si256(shl16(ph, 4 - j), m10));
				hi = _mm256_or_si256(hi, _mm256_and_si256(shl16(ph, -j), m10));
			}
			if (nl) {
				lo = _mm256_shuffle_epi8(tab, lo);
				hi = _mm256_shuffle_epi8(tab, hi);
			}
			u[j] = lo;
			u[4 + j] = hi;
			ua[j] = ua[4 + j] = _mm256_setzero_si256();
			if (nl && !QX_V) {
				ua[j] = _mm256_abs_epi8(lo);
				ua[4 + j] = _mm256_abs_epi8(hi);
			}
		}
		const __m256 dw = f16x8(e + DO), mw = mo ? f16x8(e + DO + 16) : _mm256_setzero_ps();
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i s = QX(dot32)(u, ua, xq[c] + 32 * b, T);
			if (T == DT_Q5_0) /* (q - 16) x = q x + 16 ns */
				s = _mm256_add_epi32(s, _mm256_slli_epi32(_mm256_set1_epi32(xn[c][b]), 4));
			else if (nl && QX_V) /* (t + 128) x less 128 x */
				s = _mm256_add_epi32(s, _mm256_slli_epi32(_mm256_set1_epi32(xn[c][b]), 7));
			if (mo) /* the offset: m times dx sum(x) */
				acc[c] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(xs[c] + b), acc[c]);
			acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(xd[c] + b)), _mm256_cvtepi32_ps(s), acc[c]);
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, acc[c]);
}

/* ---- q2_K and q3_K: 16 sub-blocks of 16 values ---- */

/* Sub-block s's integer sums for C tokens from the 4 value vectors u (a
 * quarter of each row's 16 values each) times its scales sw, into isum:
 * vpdpbusd sums (at most 16 x 7 x 127 after the shift, so 16 bits) through
 * vpmaddwd by [scale, 0]; or vpmaddubsw's 16-bit sums of the 4 through
 * vpmaddwd by [scale, scale]. x[c]: token c's activations of u[0]. Values
 * entering as 4^sh times themselves (masked in place) are shifted back. */
QI void QX(sub16)(__m256i *isum, const __m256i *u, __m256i sw, const int8_t *const *x, const int C, const int sh)
{
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
#if QX_V
		__m256i d = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			d = _mm256_dpbusd_epi32(d, u[i], bcast32(x[c] + 4 * i));
		isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_srai_epi32(d, sh), sw));
#else
		(void)sh;
		__m256i p = _mm256_maddubs_epi16(u[0], bcast32(x[c]));
#pragma GCC unroll 4
		for (int i = 1; i < 4; i++)
			p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[i], bcast32(x[c] + 4 * i)));
		isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, sw));
#endif
	}
}

/* The scale words of sub-block s from the 8 rows' bytes at p. */
QI __m256i QX(scale16)(const void *p, bool is_signed)
{
#if QX_V
	__m128i b = _mm_loadl_epi64((const __m128i *)p);
	__m256i w = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
	return _mm256_and_si256(w, _mm256_set1_epi32(0xffff));
#else
	return pk_dup((const uint8_t *)p, is_signed);
#endif
}

/* q2_K, C tokens over one group: per (h, half), the four qs vectors give
 * each field j's sub-block 8h + 2j + half; the mins meet the 16-value sums. */
QI void QX(tq2)(const mm_args *a, const qtile *g, int64_t t0, const int C)
{
	const int PB = 672;
	const int8_t *xq[QX_TC];
	const float *xd[QX_TC];
	const int16_t *xb[QX_TC];
	__m256 acc[QX_TC];
	uint8_t sm[256] __attribute__((aligned(32)));   /* scales [8 s + r], then mins */
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q2_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xb[c] = v.bs + 16 * g->b0;
		acc[c] = acc_begin(a, g, t0 + c);
	}
	const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e + sb * PB;
		for (int i = 0; i < 4; i++) {
			__m256i v = ld(e + 512 + 32 * i);
			_mm256_storeu_si256((__m256i *)(sm + 32 * i), _mm256_and_si256(v, m4));
			_mm256_storeu_si256((__m256i *)(sm + 128 + 32 * i), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
		}
		__asm__("" : "+m"(sm)); /* read back from memory: broadcasts, not shuffles */
		__m256i isum[QX_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int hq = 0; hq < 4; hq++) {
			const int h = hq / 2, half = hq % 2;
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++)
				pf_part(e + g->pfd, PB, 4 * hq + i, 16, ld(e + 32 * (8 * h + 4 * half + i)));
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				const int s = 8 * h + 2 * j + half;
				/* the vectors read again for each j (from L1): kept in
				 * registers across the 4, they crowded out the rest */
				__asm__("" ::: "memory");
				__m256i u[4];
				const int8_t *x[QX_TC];
#pragma GCC unroll 8
				for (int c = 0; c < C; c++)
					x[c] = xq[c] + 256 * sb + 128 * h + 32 * j + 16 * half;
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++) {
					__m256i raw = ld(e + 32 * (8 * h + 4 * half + i));
					/* VNNI: masked in place, 4^j times the value, shifted back after the sum */
					u[i] = QX_V ? _mm256_and_si256(raw, _mm256_set1_epi8((char)(3 << (2 * j))))
						    : _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
				}
				QX(sub16)(isum, u, QX(scale16)(sm + 8 * s, false), x, C, QX_V ? 2 * j : 0);
			}
		}
		const __m256 d = f16x8(e + 640), dmin = f16x8(e + 656);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i ms = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int p = 0; p < 8; p++)
				ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pk_pair(sm + 128 + 16 * p, false),
									    bcast32(xb[c] + 16 * sb + 2 * p)));
			__m256 vdx = _mm256_set1_ps(xd[c][sb]);
			__m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum[c])),
						 _mm256_mul_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(ms)));
			acc[c] = _mm256_add_ps(acc[c], t);
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, acc[c]);
}

/* The u = q + 4 vector of slot (4h + j) from a packed q3_K block's A, B, C
 * vectors of one c: on the VNNI route times 2^q3_shift (masked in
 * place), shifted back after the sub-block's sum; else as it is. */
QI __m256i QX(q3_slot)(const uint8_t *abc, const int slot)
{
	const __m256i A = ld(abc), B = ld(abc + 32), Cv = ld(abc + 64);
	const __m256i m7 = _mm256_set1_epi8(7);
#if QX_V
	const __m256i m38 = _mm256_set1_epi8(0x38);
	switch (slot) {
	case 0: return _mm256_and_si256(A, m7);
	case 1: return _mm256_and_si256(A, m38);
	case 2: return _mm256_and_si256(B, m7);
	case 3: return _mm256_and_si256(B, m38);
	case 4: return _mm256_and_si256(Cv, m7);
	case 5: return _mm256_and_si256(Cv, m38);
	case 6: /* low bits 6-7 of A to 4-5, the hmask bit 6 of C in place: 16 u */
		return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 2), _mm256_set1_epi8(0x30)),
				       _mm256_and_si256(Cv, _mm256_set1_epi8(0x40)));
	default: /* B's bits 6-7 to 5-6, C's bit 7 in place: 32 u */
		return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 1), _mm256_set1_epi8(0x60)),
				       _mm256_and_si256(Cv, _mm256_set1_epi8((char)0x80)));
	}
#else
	const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
	switch (slot) {
	case 0: return _mm256_and_si256(A, m7);
	case 1: return _mm256_and_si256(_mm256_srli_epi16(A, 3), m7);
	case 2: return _mm256_and_si256(B, m7);
	case 3: return _mm256_and_si256(_mm256_srli_epi16(B, 3), m7);
	case 4: return _mm256_and_si256(Cv, m7);
	case 5: return _mm256_and_si256(_mm256_srli_epi16(Cv, 3), m7);
	case 6:
		return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 6), m3),
				       _mm256_and_si256(_mm256_srli_epi16(Cv, 4), b2));
	default:
		return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 6), m3),
				       _mm256_and_si256(_mm256_srli_epi16(Cv, 5), b2));
	}
#endif
}

/* The power of two slot's values enter the VNNI route's sums times. */
QI int QX(q3_shift)(const int slot)
{
	return slot == 6 ? 4 : slot == 7 ? 5 : slot % 2 ? 3 : 0;
}

/* q3_K, C tokens over one group: per half of the values (c = 0..3, 4..7)
 * and slot (4h + j), sub-block 8h + 2j + half from the four c's; the -4 of
 * u = q + 4 through the 16-value sums. */
QI void QX(tq3)(const mm_args *a, const qtile *g, int64_t t0, const int C)
{
	const int PB = 880;
	const int8_t *xq[QX_TC];
	const float *xd[QX_TC];
	const int16_t *xb[QX_TC];
	__m256 acc[QX_TC];
	int8_t sm[128] __attribute__((aligned(32)));   /* scales less 32, [8 s + r] */
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q3_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xb[c] = v.bs + 16 * g->b0;
		acc[c] = acc_begin(a, g, t0 + c);
	}
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e + sb * PB;
		q3_scales(e + 768, sm);
		__asm__("" : "+m"(sm));
		__m256i isum[QX_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
		for (int half = 0; half < 2; half++)
#pragma GCC unroll 8
			for (int slot = 0; slot < 8; slot++) {
				const int h = slot / 4, j = slot % 4, s = 8 * h + 2 * j + half;
				__asm__("" ::: "memory"); /* the 12 vectors read again from L1 per slot */
				__m256i u[4];
#pragma GCC unroll 4
				for (int i = 0; i < 4; i++)
					u[i] = QX(q3_slot)(e + 96 * (4 * half + i), slot);
				pf_part(e + g->pfd, PB, 8 * half + slot, 16, u[0]);
				const int8_t *x[QX_TC];
#pragma GCC unroll 8
				for (int c = 0; c < C; c++)
					x[c] = xq[c] + 256 * sb + 128 * h + 32 * j + 16 * half;
				QX(sub16)(isum, u, QX(scale16)(sm + 8 * s, true), x, C, QX_V ? QX(q3_shift)(slot) : 0);
			}
		const __m256 d = f16x8(e + 864);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i ms = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int p = 0; p < 8; p++)
				ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pk_pair((const uint8_t *)sm + 16 * p, true),
									    bcast32(xb[c] + 16 * sb + 2 * p)));
			__m256i s = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(ms, 2));
			__m256 vdx = _mm256_set1_ps(xd[c][sb]);
			acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(s)));
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, acc[c]);
}

/* ---- iq4_xs: 8 sub-blocks of 32 table values ---- */

QI void QX(txs)(const mm_args *a, const qtile *g, int64_t t0, const int C)
{
	const int PB = 1088;
	const int8_t *xq[QX_TC];
	const float *xd[QX_TC];
	const int16_t *xb[QX_TC];
	__m256 acc[QX_TC];
	int8_t sc[64] __attribute__((aligned(32)));   /* sub-block s at 32 (s % 2) + 8 (s / 2) */
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_IQ4_XS, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		xb[c] = v.bs + 16 * g->b0;
		acc[c] = acc_begin(a, g, t0 + c);
	}
	const __m256i m4 = _mm256_set1_epi8(15), tab = iq4_table(QX_V ? 128 : 0);
#if !QX_V
	(void)xb;
#endif
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e + sb * PB;
		xs_scales(e + 1024, sc);
		__asm__("" : "+m"(sc));
		__m256i isum[QX_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
		for (int s = 0; s < 8; s++) {
			const int so = 32 * (s % 2) + 8 * (s / 2);
			__m256i u[8];
#pragma GCC unroll 4
			for (int j = 0; j < 4; j++) {
				__m256i raw = ld(e + 32 * (4 * s + j));
				pf_part(e + g->pfd, PB, 4 * s + j, 32, raw);
				u[j] = _mm256_shuffle_epi8(tab, _mm256_and_si256(raw, m4));
				u[4 + j] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
			}
#if QX_V
			/* sums up to 32 x 241 x 127: the scale by vpmulld */
			const __m256i sw = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + so)));
#pragma GCC unroll 8
			for (int c = 0; c < C; c++) {
				const int8_t *x = xq[c] + 256 * sb + 32 * s;
				__m256i d0 = _mm256_setzero_si256(), d1 = _mm256_setzero_si256();
#pragma GCC unroll 4
				for (int j = 0; j < 4; j++) {
					d0 = _mm256_dpbusd_epi32(d0, u[j], bcast32(x + 4 * j));
					d1 = _mm256_dpbusd_epi32(d1, u[4 + j], bcast32(x + 16 + 4 * j));
				}
				isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(_mm256_add_epi32(d0, d1), sw));
			}
#else
			const __m256i sw = pk_dup((const uint8_t *)sc + so, true);
			__m256i ua[8];
#pragma GCC unroll 8
			for (int i = 0; i < 8; i++)
				ua[i] = _mm256_abs_epi8(u[i]);
#pragma GCC unroll 8
			for (int c = 0; c < C; c++) {
				const int8_t *x = xq[c] + 256 * sb + 32 * s;
#pragma GCC unroll 8
				for (int i = 0; i < 8; i++) {
					__m256i xv = bcast32(x + (i < 4 ? 4 * i : 16 + 4 * (i - 4)));
					__m256i p = _mm256_maddubs_epi16(ua[i], _mm256_sign_epi8(xv, u[i]));
					isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, sw));
				}
			}
#endif
		}
		const __m256 d = f16x8(e + 1072);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i s = isum[c];
#if QX_V
			/* less 128 x the scale x each sub-block's activation sum */
			__m256i cs = _mm256_setzero_si256();
#pragma GCC unroll 8
			for (int p = 0; p < 8; p++)
				cs = _mm256_add_epi32(cs, _mm256_madd_epi16(pk_dup((const uint8_t *)sc + 32 * (p % 2) + 8 * (p / 2), true),
									    bcast32(xb[c] + 16 * sb + 2 * p)));
			s = _mm256_sub_epi32(s, _mm256_slli_epi32(cs, 7));
#endif
			__m256 vdx = _mm256_set1_ps(xd[c][sb]);
			acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(s)));
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, acc[c]);
}

/* ---- q5_K: 8 sub-blocks of 32 five-bit values, with mins ---- */

QI void QX(tk5)(const mm_args *a, const qtile *g, int64_t t0, const int C)
{
	const int PB = 1408;
	const int8_t *xq[QX_TC];
	const float *xd[QX_TC];
	const int16_t *x32[QX_TC];   /* sums of each 32 activations (the AVX2 set's) */
	__m256 acc[QX_TC];
	uint8_t sm[128] __attribute__((aligned(32)));   /* scales [8 s + r], mins 64 + [8 s + r] */
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		qact_view v = qact_view_of(DT_Q5_K, a->qa + (t0 + c) * a->lda, a->k);
		xq[c] = v.q + 256 * g->b0;
		xd[c] = v.d + g->b0;
		x32[c] = act_sums32(a, t0 + c) + 8 * g->b0;
		acc[c] = acc_begin(a, g, t0 + c);
	}
	const __m256i m4 = _mm256_set1_epi8(15), m10 = _mm256_set1_epi8(0x10);
	for (int64_t sb = 0; sb < g->nb; sb++) {
		const uint8_t *e = g->e + sb * PB;
		k5_scales(e + 1280, sm, sm + 64);
		__asm__("" : "+m"(sm));
		__m256i isum[QX_TC];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++)
			isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
		for (int p = 0; p < 4; p++) {
#if QX_V
			const __m256i sl = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p)));
			const __m256i sh = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sm + 16 * p + 8)));
#else
			const __m256i sl = pk_dup(sm + 16 * p, false), sh = pk_dup(sm + 16 * p + 8, false);
#endif
			__m256i dl[QX_TC], dh[QX_TC];
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				__m256i raw = ld(e + 32 * (8 * p + j)), h = ld(e + 1024 + 32 * j);
				pf_part(e + g->pfd, PB, 8 * p + j, 32, raw);
				__m256i lo = _mm256_or_si256(_mm256_and_si256(raw, m4), _mm256_and_si256(shl16(h, 4 - 2 * p), m10));
				__m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
							     _mm256_and_si256(shl16(h, 3 - 2 * p), m10));
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					const int8_t *x = xq[c] + 256 * sb + 64 * p + 4 * j;
#if QX_V
					dl[c] = _mm256_dpbusd_epi32(j ? dl[c] : _mm256_setzero_si256(), lo, bcast32(x));
					dh[c] = _mm256_dpbusd_epi32(j ? dh[c] : _mm256_setzero_si256(), hi, bcast32(x + 32));
#else
					/* 16-bit sums of 4 vectors (4 x 2 x 31 x 127), then the scales */
					__m256i pl = _mm256_maddubs_epi16(lo, bcast32(x));
					__m256i ph = _mm256_maddubs_epi16(hi, bcast32(x + 32));
					dl[c] = j % 4 ? _mm256_add_epi16(dl[c], pl) : pl;
					dh[c] = j % 4 ? _mm256_add_epi16(dh[c], ph) : ph;
					if (j % 4 == 3)
						isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(dl[c], sl),
												     _mm256_madd_epi16(dh[c], sh)));
#endif
				}
			}
#if QX_V
			/* sums up to 32 x 31 x 127: the scales by vpmulld */
#pragma GCC unroll 8
			for (int c = 0; c < C; c++)
				isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_mullo_epi32(dl[c], sl),
										     _mm256_mullo_epi32(dh[c], sh)));
#endif
		}
		const __m256 d = f16x8(e + 1376), dmin = f16x8(e + 1392);
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			__m256i ms = _mm256_setzero_si256();
#pragma GCC unroll 4
			for (int p = 0; p < 4; p++)
				ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pk_pair(sm + 64 + 16 * p, false),
									    bcast32(x32[c] + 8 * sb + 2 * p)));
			__m256 vdx = _mm256_set1_ps(xd[c][sb]);
			__m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, vdx), _mm256_cvtepi32_ps(isum[c])),
						 _mm256_mul_ps(_mm256_mul_ps(dmin, vdx), _mm256_cvtepi32_ps(ms)));
			acc[c] = _mm256_add_ps(acc[c], t);
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++)
		acc_end(a, g, t0 + c, acc[c]);
}

/* ---- the tiles' table: [type][tokens] ---- */

#define QX_TILE(N, C, E) QN void QX(N##_##C)(const mm_args *a, const qtile *g, int64_t t0) { E; }
#define QX_F32(N, T, C) QX_TILE(N, C, QX(t32)(a, g, t0, C, T))
#define QX_UPTO4(M, ...) M(__VA_ARGS__, 1) M(__VA_ARGS__, 2) M(__VA_ARGS__, 3) M(__VA_ARGS__, 4)
QX_UPTO4(QX_F32, q41, DT_Q4_1) QX_UPTO4(QX_F32, q50, DT_Q5_0) QX_UPTO4(QX_F32, q51, DT_Q5_1)
QX_UPTO4(QX_F32, nl, DT_IQ4_NL)
#define QX_K(C) QX_TILE(q2k, C, QX(tq2)(a, g, t0, C)) QX_TILE(q3k, C, QX(tq3)(a, g, t0, C)) \
	QX_TILE(xs, C, QX(txs)(a, g, t0, C))
QX_K(1) QX_K(2) QX_K(3) QX_K(4)
QX_TILE(q5k, 1, QX(tk5)(a, g, t0, 1)) QX_TILE(q5k, 2, QX(tk5)(a, g, t0, 2))
QX_TILE(q5k, 3, QX(tk5)(a, g, t0, 3)) QX_TILE(q5k, 4, QX(tk5)(a, g, t0, 4))
#if QX_TC > 4
QX_F32(q41, DT_Q4_1, 5) QX_F32(q41, DT_Q4_1, 6) QX_F32(q41, DT_Q4_1, 7) QX_F32(q41, DT_Q4_1, 8)
QX_F32(q50, DT_Q5_0, 5) QX_F32(q50, DT_Q5_0, 6) QX_F32(q50, DT_Q5_0, 7) QX_F32(q50, DT_Q5_0, 8)
QX_F32(q51, DT_Q5_1, 5) QX_F32(q51, DT_Q5_1, 6) QX_F32(q51, DT_Q5_1, 7) QX_F32(q51, DT_Q5_1, 8)
QX_F32(nl, DT_IQ4_NL, 5) QX_F32(nl, DT_IQ4_NL, 6) QX_F32(nl, DT_IQ4_NL, 7) QX_F32(nl, DT_IQ4_NL, 8)
QX_K(5) QX_K(6)
#define QX_ROW8(N) {NULL, QX(N##_1), QX(N##_2), QX(N##_3), QX(N##_4), QX(N##_5), QX(N##_6), QX(N##_7), QX(N##_8)}
#define QX_ROW6(N) {NULL, QX(N##_1), QX(N##_2), QX(N##_3), QX(N##_4), QX(N##_5), QX(N##_6)}
#else
#define QX_ROW8(N) {NULL, QX(N##_1), QX(N##_2), QX(N##_3), QX(N##_4)}
#define QX_ROW6(N) QX_ROW8(N)
#endif
static const qtile_fn QX(tiles)[QX_N][TC_MAX + 1] = {
	QX_ROW8(q41), QX_ROW8(q50), QX_ROW8(q51), QX_ROW8(nl), QX_ROW6(q2k), QX_ROW6(q3k), QX_ROW6(xs),
	{NULL, QX(q5k_1), QX(q5k_2), QX(q5k_3), QX(q5k_4)},
};
#undef QX_TILE
#undef QX_F32
#undef QX_UPTO4
#undef QX_K
#undef QX_ROW8
#undef QX_ROW6
