/*
 * formats.h - the numeric formats of npusim's data types: exact decode, encode with each
 * format's own rounding, overflow, NaN/Inf and subnormal rules, and OCP MX block scaling.
 *
 * Models the value sets and conversions of every enum npu_dtype (common/dtype.h), so the chip
 * model can store, read and round tensors bit-exactly. Sources, one per format (details and
 * choices in formats/README.md and next to each implementation):
 *   fp16, fp32       IEEE 754-2019 binary16 / binary32, round to nearest even (RNE)
 *   bf16             bfloat16: binary32's exponent with 7 fraction bits, RNE straight from double
 *   hf32             Ascend HF32: 1 sign, 8 exponent, 11 fraction bits in an fp32 container,
 *                    no subnormals, RNE (CANN ATC --allow_hf32 and Ascend C SetHF32 docs)
 *   fp8_e4m3         OCP 8-bit Floating Point Specification (OFP8) rev 1.0, E4M3 ("E4M3FN")
 *   fp8_e5m2         OFP8 rev 1.0, E5M2
 *   hif8             HiFloat8, "Ascend HiFloat8 Format for Deep Learning" (arXiv 2409.16626),
 *                    rounding to nearest, ties away from zero, as that paper and CANN define it
 *   fp4_e2m1         OCP Microscaling Formats (MX) v1.0, FP4 E2M1 element
 *   mxfp8, mxfp4     OCP MX v1.0: E4M3 / E2M1 elements, one E8M0 scale per 32 elements
 *                    (MXFP8 with E5M2 elements: fmt_mx_quantize with fp8_e5m2)
 *   int4/8/16/32, uint8  two's complement / unsigned; RNE, saturate, NaN -> 0
 *
 * Element arrays: 4-bit types (int4, fp4_e2m1, mxfp4) pack two elements per byte, element 0
 * in the low nibble; wider types are arrays of their storage type in host byte order (hf32
 * is a uint32_t holding an fp32 bit pattern). MX scales are kept apart (fmt_mx_quantize).
 *
 * Everything here is a pure function of its arguments: no state, no allocation, no errors.
 * Passing a dtype a function does not take is a bug and aborts (NPU_ASSERT).
 */
#ifndef NPUSIM_FORMATS_FORMATS_H
#define NPUSIM_FORMATS_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

/* ---- generic access by dtype ------------------------------------------------------------ */

/*
 * fmt_decode - the value of element @index of the array @data of type @t.
 * For mxfp8 / mxfp4 the element's own code is decoded (E4M3 / E2M1) without its block scale;
 * use fmt_mx_dequantize for scaled values. NaN and infinities come back as such.
 */
double fmt_decode(enum npu_dtype t, const void *data, size_t index);

/*
 * fmt_encode - store @v as element @index of the array @data of type @t, rounded by the
 * format's rule (RNE for all but hif8, which rounds ties away from zero) and with its own
 * overflow / NaN / Inf handling (see the per-format functions). A 4-bit store leaves the other
 * nibble of the byte unchanged. For mxfp8 / mxfp4, @v is the already-scaled element value.
 */
void fmt_encode(enum npu_dtype t, void *data, size_t index, double v);

/*
 * fmt_bytes - storage bytes of @count elements of type @t (4-bit types round up to a whole
 * byte). For mxfp8 / mxfp4 this counts the elements only; add fmt_mx_scale_count(count)
 * bytes for their E8M0 scales.
 */
size_t fmt_bytes(enum npu_dtype t, size_t count);

/* fmt_round - @v rounded to type @t: decode(encode(v)). */
double fmt_round(enum npu_dtype t, double v);

/* fmt_max_finite - the largest finite value of type @t (of its element for mxfp8 / mxfp4). */
double fmt_max_finite(enum npu_dtype t);

/* fmt_min_positive - the smallest positive value of type @t (subnormal if it has them). */
double fmt_min_positive(enum npu_dtype t);

/* ---- IEEE-style binary floating point ------------------------------------------------------
 * Each *_from_double rounds a double straight to the format (one rounding, never through
 * float) and each *_to_double is exact.
 */

/*
 * fmt_fp16_from_double - IEEE binary16 code of @v: RNE, subnormals, overflow to +-Inf
 * (values >= 65520), NaN -> quiet NaN 0x7E00 with @v's sign, -0 kept.
 */
uint16_t fmt_fp16_from_double(double v);
/* fmt_fp16_to_double - exact value of binary16 code @h. */
double fmt_fp16_to_double(uint16_t h);

/*
 * fmt_bf16_from_double - bfloat16 code of @v: RNE from the double itself (no double rounding
 * through fp32), subnormals, overflow to +-Inf, NaN -> 0x7FC0 with @v's sign.
 */
uint16_t fmt_bf16_from_double(double v);
/* fmt_bf16_to_double - exact value of bfloat16 code @b. */
double fmt_bf16_to_double(uint16_t b);

/*
 * fmt_fp32_from_double - IEEE binary32 bit pattern of @v, what (float)v gives under the
 * default rounding mode: RNE, subnormals, overflow to +-Inf, NaN -> 0x7FC00000 with sign.
 */
uint32_t fmt_fp32_from_double(double v);
/* fmt_fp32_to_double - exact value of binary32 bit pattern @f. */
double fmt_fp32_to_double(uint32_t f);

/*
 * fmt_hf32_from_double - HF32 code of @v as an fp32 bit pattern whose low 12 bits are zero:
 * 11 fraction bits, RNE (the cube's default HF32 rounding), overflow to +-Inf, no subnormals
 * (results below 2^-126 flush to signed zero), NaN -> 0x7FC00000 with sign.
 */
uint32_t fmt_hf32_from_double(double v);
/*
 * fmt_hf32_to_double - value of HF32 code @h. A valid code has its low 12 bits zero and is
 * decoded exactly; any other fp32 pattern is read as the fp32 value it spells rounded to HF32,
 * as the cube does with fp32 input in HF32 mode. Exponent field 0 reads as signed zero.
 */
double fmt_hf32_to_double(uint32_t h);

/*
 * fmt_fp8_e4m3_from_double - OCP E4M3 code of @v: bias 7, subnormals down to 2^-9, no
 * infinities, S.1111.111 is NaN. RNE; finite overflow and +-Inf SATURATE to +-448 (the OCP
 * saturating conversion mode, the one used for training); NaN -> 0x7F with @v's sign.
 */
uint8_t fmt_fp8_e4m3_from_double(double v);
/* fmt_fp8_e4m3_to_double - exact value of E4M3 code @c (0x7F / 0xFF are NaN). */
double fmt_fp8_e4m3_to_double(uint8_t c);

/*
 * fmt_fp8_e5m2_from_double - OCP E5M2 code of @v: IEEE-like, bias 15, subnormals down to
 * 2^-16, max 57344. RNE; finite overflow SATURATES to +-57344 (OCP saturating mode), +-Inf
 * stays +-Inf, NaN -> 0x7E with @v's sign.
 */
uint8_t fmt_fp8_e5m2_from_double(double v);
/* fmt_fp8_e5m2_to_double - exact value of E5M2 code @c. */
double fmt_fp8_e5m2_to_double(uint8_t c);

/*
 * fmt_fp4_e2m1_from_double - OCP MX E2M1 code of @v in the low nibble: values 0, 0.5, 1, 1.5,
 * 2, 3, 4, 6 with sign; RNE; no Inf/NaN in the format, so overflow and +-Inf saturate to +-6
 * and NaN encodes as +0 (documented choice; inside an MX block a NaN sets the scale to NaN).
 */
uint8_t fmt_fp4_e2m1_from_double(double v);
/* fmt_fp4_e2m1_to_double - exact value of the E2M1 code in the low nibble of @c. */
double fmt_fp4_e2m1_to_double(uint8_t c);

/* ---- HiFloat8 ------------------------------------------------------------------------------ */

/*
 * fmt_hif8_from_double - HiFloat8 code of @v (arXiv 2409.16626): tapered precision, 3/2/1
 * mantissa bits for |exponent| <= 3 / <= 7 / <= 15 and denormals 2^-22..2^-16. Rounds to
 * nearest with ties away from zero (the format's defined rounding, "TA"); magnitudes from
 * 40960 up (half way to the 1.5*2^15 pattern that encodes Inf) and +-Inf give +-Inf
 * (0x6F / 0xEF); below 2^-23 gives 0; zero of either sign is 0x00; NaN is 0x80.
 */
uint8_t fmt_hif8_from_double(double v);
/* fmt_hif8_to_double - exact value of HiFloat8 code @c (0x80 NaN, 0x6F / 0xEF +-Inf). */
double fmt_hif8_to_double(uint8_t c);

/* ---- integers: round to nearest even, saturate to the range, NaN -> 0 ----------------------- */

/* fmt_int8_from_double - @v rounded (RNE) and saturated to [-128, 127]; NaN -> 0. */
int8_t fmt_int8_from_double(double v);
/* fmt_int8_to_double - @i as a double. */
double fmt_int8_to_double(int8_t i);
/* fmt_uint8_from_double - @v rounded (RNE) and saturated to [0, 255]; NaN -> 0. */
uint8_t fmt_uint8_from_double(double v);
/* fmt_uint8_to_double - @u as a double. */
double fmt_uint8_to_double(uint8_t u);
/* fmt_int16_from_double - @v rounded (RNE) and saturated to [-32768, 32767]; NaN -> 0. */
int16_t fmt_int16_from_double(double v);
/* fmt_int16_to_double - @i as a double. */
double fmt_int16_to_double(int16_t i);
/* fmt_int32_from_double - @v rounded (RNE) and saturated to [-2^31, 2^31 - 1]; NaN -> 0. */
int32_t fmt_int32_from_double(double v);
/* fmt_int32_to_double - @i as a double (exact). */
double fmt_int32_to_double(int32_t i);
/*
 * fmt_int4_from_double - @v rounded (RNE) and saturated to [-8, 7], as a two's complement
 * nibble (0..15) in the low 4 bits; NaN -> 0.
 */
uint8_t fmt_int4_from_double(double v);
/* fmt_int4_to_double - the two's complement nibble in the low 4 bits of @c, as a double. */
double fmt_int4_to_double(uint8_t c);

/* ---- E8M0 scales and OCP MX block scaling --------------------------------------------------- */

#define FMT_MX_BLOCK 32   /* elements sharing one scale (OCP MX v1.0: k = 32) */
#define FMT_E8M0_NAN 0xFF /* the E8M0 NaN code */

/* fmt_e8m0_to_double - value of E8M0 code @e: 2^(e - 127); 0xFF is NaN. */
double fmt_e8m0_to_double(uint8_t e);

/*
 * fmt_e8m0_from_exponent - E8M0 code of 2^@exp, with @exp clamped to the representable range
 * [-127, 127].
 */
uint8_t fmt_e8m0_from_exponent(int exp);

/* fmt_mx_scale_count - number of scales for @n elements: one per block of FMT_MX_BLOCK, the
 * last block possibly partial. */
size_t fmt_mx_scale_count(size_t n);

/*
 * fmt_mx_quantize - OCP MX v1.0 conversion (section 6.3) of @n doubles @in, taken in blocks
 * of FMT_MX_BLOCK consecutive values along the reduction dimension (the last block may be
 * partial), for @t = NPU_DT_MXFP8 or NPU_DT_FP8_E4M3 (E4M3 elements, emax_elem 8),
 * NPU_DT_FP8_E5M2 (MXFP8 with E5M2 elements, emax_elem 15), NPU_DT_MXFP4 or NPU_DT_FP4_E2M1
 * (E2M1 elements, emax_elem 2); the element codes are those of @t. Per block: shared_exp = floor(log2(max |v|)) - emax_elem, clamped to
 * [-127, 127]; scales[b] = E8M0(shared_exp); each element = encode(v / 2^shared_exp), RNE
 * and saturating. An all-zero block gets shared_exp -127 (scale code 0, 2^-127) and zero
 * elements. A block holding a NaN or an infinity gets the NaN scale 0xFF and zero elements.
 * @elems receives fmt_bytes(t, n) bytes (mxfp4 packed, element 0 in the low nibble) and
 * @scales fmt_mx_scale_count(n) bytes; both are owned by the caller.
 */
void fmt_mx_quantize(enum npu_dtype t, const double *in, size_t n, void *elems, uint8_t *scales);

/*
 * fmt_mx_dequantize - the inverse of fmt_mx_quantize: out[i] = element(i) * 2^(scale - 127)
 * for @n elements of type @t (any type fmt_mx_quantize takes); every value of a block whose
 * scale is 0xFF is NaN.
 */
void fmt_mx_dequantize(enum npu_dtype t, const void *elems, const uint8_t *scales, size_t n,
                       double *out);

#endif
