/* kernels/fp16.c: half and bfloat16 conversions (IEEE 754 binary16 layout:
 * 1 sign, 5 exponent, 10 mantissa bits; bf16 is the top half of an f32). */
#include "kernels/kern.h"

#include <string.h>

static float bits_to_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0x1f) /* inf / nan */
		return bits_to_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {
		/* zero or subnormal: value is man * 2^-24 */
		float v = (float)man * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
	return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (u >> 16) & 0x8000;
	uint32_t abs = u & 0x7fffffffu;
	if (abs >= 0x7f800000u) /* inf or nan (keep nan quiet) */
		return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
	if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
		return sign | 0x7c00;
	if (abs < 0x38800000u) {
		/* subnormal half (or zero): round abs * 2^24 to an integer, ties to even */
		float v = bits_to_f32(abs) * 16777216.0f;
		uint32_t m = (uint32_t)v;
		float frac = v - (float)m;
		if (frac > 0.5f || (frac == 0.5f && (m & 1)))
			m++;
		return sign | (uint16_t)m;
	}
	/* normal: rebias exponent, round mantissa to 10 bits, ties to even */
	uint32_t r = abs - (112u << 23);
	uint32_t lsb = (r >> 13) & 1;
	r += 0xfff + lsb;
	return sign | (uint16_t)(r >> 13);
}

float bf16_to_f32(uint16_t h)
{
	return bits_to_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it quiet */
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}
