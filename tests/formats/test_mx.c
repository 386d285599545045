/*
 * test_mx.c - E8M0 scales and OCP MX block quantization (MXFP8 with E4M3 or E5M2 elements,
 * MXFP4 with E2M1 elements): scale selection on hand-made blocks, zero / NaN / Inf / huge / tiny
 * blocks, partial last block, dequantized value = element * 2^(scale - 127), per-element error
 * bounds on random blocks, and every finite element code of every element type at every scale.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"
#include "ref.h"

TestSuite(mx, .timeout = 30);

#define MAXN 4096

static bool four_bit(enum npu_dtype t)
{
  return t == NPU_DT_MXFP4 || t == NPU_DT_FP4_E2M1;
}

/* Element code i of an MX element array, read here without the library's packing code. */
static uint8_t elem_code(enum npu_dtype t, const uint8_t *elems, size_t i)
{
  if (!four_bit(t)) return elems[i];
  return i % 2 ? elems[i / 2] >> 4 : elems[i / 2] & 0xF;
}

/* Value of element code c of t's element format. */
static double code_value(enum npu_dtype t, uint8_t c)
{
  if (four_bit(t)) return fmt_fp4_e2m1_to_double(c);
  return t == NPU_DT_FP8_E5M2 ? fmt_fp8_e5m2_to_double(c) : fmt_fp8_e4m3_to_double(c);
}

static double elem_value(enum npu_dtype t, const uint8_t *elems, size_t i)
{
  return code_value(t, elem_code(t, elems, i));
}

/* Quantize then dequantize @n values; checks dequantized = element * 2^(scale - 127). */
static void run(enum npu_dtype t, const double *in, size_t n, uint8_t *elems, uint8_t *scales,
                double *out)
{
  cr_assert_leq(n, MAXN);
  memset(elems, 0xA5, fmt_bytes(t, n) + 1);
  memset(scales, 0xA5, fmt_mx_scale_count(n) + 1);
  fmt_mx_quantize(t, in, n, elems, scales);
  cr_assert_eq(elems[fmt_bytes(t, n)], 0xA5, "wrote past the elements");
  cr_assert_eq(scales[fmt_mx_scale_count(n)], 0xA5, "wrote past the scales");
  fmt_mx_dequantize(t, elems, scales, n, out);
  for (size_t i = 0; i < n; i++) {
    uint8_t s = scales[i / FMT_MX_BLOCK];
    if (s == 0xFF) {
      cr_assert(isnan(out[i]), "element %zu of a NaN-scale block", i);
      continue;
    }
    double want = elem_value(t, elems, i) * ldexp(1.0, s - 127);
    cr_assert(out[i] == want || (isnan(out[i]) && isnan(want)), "element %zu: %a vs %a", i,
              out[i], want);
  }
}

static uint8_t elems[MAXN + 1], scales[MAXN / 32 + 2];
static double out[MAXN];

Test(mx, e8m0_helpers)
{
  cr_assert_eq(fmt_e8m0_to_double(127), 1.0);
  cr_assert_eq(fmt_e8m0_to_double(0), 0x1p-127);
  cr_assert_eq(fmt_e8m0_to_double(254), 0x1p127);
  cr_assert_eq(fmt_e8m0_to_double(130), 8.0);
  cr_assert(isnan(fmt_e8m0_to_double(0xFF)));
  cr_assert_eq(fmt_e8m0_from_exponent(0), 127);
  cr_assert_eq(fmt_e8m0_from_exponent(-127), 0);
  cr_assert_eq(fmt_e8m0_from_exponent(127), 254);
  cr_assert_eq(fmt_e8m0_from_exponent(-500), 0);
  cr_assert_eq(fmt_e8m0_from_exponent(500), 254);
  cr_assert_eq(fmt_mx_scale_count(0), 0);
  cr_assert_eq(fmt_mx_scale_count(1), 1);
  cr_assert_eq(fmt_mx_scale_count(32), 1);
  cr_assert_eq(fmt_mx_scale_count(33), 2);
  cr_assert_eq(fmt_mx_scale_count(64), 2);
  cr_assert_eq(fmt_bytes(NPU_DT_MXFP8, 33), 33);
  cr_assert_eq(fmt_bytes(NPU_DT_MXFP4, 33), 17);
}

Test(mx, scale_of_a_block_whose_max_is_a_power_of_two)
{
  double in[32];
  for (int i = 0; i < 32; i++) in[i] = (i % 2 ? -1 : 1) * (i + 1) / 4.0; /* max 8 */
  /* E4M3: floor(log2 8) - 8 = -5, so 8 becomes 2^8 and each element is in[i] * 2^5 rounded. */
  run(NPU_DT_MXFP8, in, 32, elems, scales, out);
  cr_assert_eq(scales[0], 127 - 5);
  cr_assert_eq(elems[31], 0x78 | 0x80, "8 / 2^-5 = 256 = 2^8, negative"); /* i = 31 is odd */
  for (int i = 0; i < 32; i++)
    cr_assert_eq(out[i], fmt_round(NPU_DT_FP8_E4M3, in[i] * 32) / 32, "element %d", i);
  /* E2M1: floor(log2 8) - 2 = 1. */
  run(NPU_DT_MXFP4, in, 32, elems, scales, out);
  cr_assert_eq(scales[0], 128);
  cr_assert_eq(out[31], -8.0);
  cr_assert_eq(out[0], 0.0); /* 0.25 / 2 = 0.125: below half of 0.5 */
  cr_assert_eq(out[3], -1.0); /* -1 / 2 = -0.5 */
  cr_assert_eq(out[23], -6.0); /* -6 / 2 = -3 */
}

Test(mx, block_max_just_below_a_power_of_two_is_clipped)
{
  /* The spec's rule keeps floor(log2(max)): 7.99 scales by 2^-6 to 511.4, beyond E4M3's 448,
   * and saturates (the clipping the MX spec accepts for the largest values). */
  double in[3] = {7.99, -7.99, 1.0};
  run(NPU_DT_MXFP8, in, 3, elems, scales, out);
  cr_assert_eq(scales[0], 127 + 2 - 8);
  cr_assert_eq(out[0], 7.0);
  cr_assert_eq(out[1], -7.0);
  cr_assert_eq(out[2], 1.0);
  run(NPU_DT_MXFP4, in, 3, elems, scales, out); /* 7.99 / 1 -> 6 */
  cr_assert_eq(scales[0], 127);
  cr_assert_eq(out[0], 6.0);
  cr_assert_eq(out[1], -6.0);
}

Test(mx, all_zero_block)
{
  double in[40] = {0};
  in[5] = -0.0;
  run(NPU_DT_MXFP8, in, 40, elems, scales, out);
  cr_assert_eq(scales[0], 0);
  cr_assert_eq(scales[1], 0);
  for (int i = 0; i < 40; i++) cr_assert_eq(out[i], 0.0);
  cr_assert(signbit(out[5]));
  run(NPU_DT_MXFP4, in, 40, elems, scales, out);
  cr_assert_eq(scales[0], 0);
  for (int i = 0; i < 40; i++) cr_assert_eq(out[i], 0.0);
}

Test(mx, one_huge_value_sets_the_scale)
{
  double in[32];
  for (int i = 0; i < 32; i++) in[i] = 1.0 + i / 64.0;
  in[7] = 1e6;
  run(NPU_DT_MXFP8, in, 32, elems, scales, out);
  /* floor(log2 1e6) = 19 -> shared_exp 11. The other values scale to below 2^-10, half of
   * E4M3's smallest subnormal, and become zero; 1e6 / 2^11 = 488.3 saturates to 448. */
  cr_assert_eq(scales[0], 127 + 11);
  cr_assert_eq(out[7], 448.0 * 2048);
  for (int i = 0; i < 32; i++)
    if (i != 7) cr_assert_eq(out[i], 0.0, "element %d", i);
  in[7] = 1024.0; /* exactly 2^10 -> shared_exp 2 */
  run(NPU_DT_MXFP8, in, 32, elems, scales, out);
  cr_assert_eq(scales[0], 129);
  cr_assert_eq(out[7], 1024.0);
  cr_assert_eq(out[0], 1.0);
}

Test(mx, nan_or_inf_makes_the_block_nan)
{
  double in[70];
  for (int i = 0; i < 70; i++) in[i] = i - 35;
  in[40] = NAN;
  in[65] = -INFINITY;
  run(NPU_DT_MXFP8, in, 70, elems, scales, out);
  cr_assert_eq(scales[1], 0xFF);
  cr_assert_eq(scales[2], 0xFF);
  cr_assert_neq(scales[0], 0xFF);
  for (int i = 0; i < 32; i++) cr_assert(!isnan(out[i]));
  for (int i = 32; i < 70; i++) cr_assert(isnan(out[i]), "element %d", i);
  run(NPU_DT_MXFP4, in, 70, elems, scales, out);
  cr_assert_eq(scales[1], 0xFF);
  cr_assert_eq(scales[2], 0xFF);
}

Test(mx, partial_last_block_uses_its_own_values)
{
  double in[70];
  for (int i = 0; i < 64; i++) in[i] = 1000.0 * (i + 1);
  static const double tail[6] = {0.25, 0.5, 0.75, 1.0, 1.5, 0.375}; /* max 1.5 */
  for (int i = 64; i < 70; i++) in[i] = tail[i - 64];
  run(NPU_DT_MXFP8, in, 70, elems, scales, out);
  cr_assert_eq(scales[2], 127 + 0 - 8);
  for (int i = 64; i < 70; i++) cr_assert_eq(out[i], in[i], "element %d", i);
  run(NPU_DT_MXFP4, in, 70, elems, scales, out); /* 1.5: shared_exp -2, values x4 */
  cr_assert_eq(scales[2], 125);
  for (int i = 64; i < 70; i++) cr_assert_eq(out[i], in[i], "element %d", i);
}

Test(mx, scale_clamps_to_the_e8m0_range)
{
  double huge[2] = {1e300, -3e299};
  run(NPU_DT_MXFP8, huge, 2, elems, scales, out);
  cr_assert_eq(scales[0], 254);
  cr_assert_eq(out[0], 448 * 0x1p127);
  cr_assert_eq(out[1], -448 * 0x1p127);
  double tiny[2] = {0x1p-140, 0x1p-136}; /* shared_exp would be -144: clamped to -127 */
  run(NPU_DT_MXFP8, tiny, 2, elems, scales, out);
  cr_assert_eq(scales[0], 0);
  cr_assert_eq(out[0], 0.0);       /* scaled to 2^-13: below half of E4M3's 2^-9 */
  cr_assert_eq(out[1], 0x1p-136); /* scaled to 2^-9 exactly */
}

/* Half an ulp of element format @t at |x| (scaled domain). */
static double half_ulp(enum npu_dtype t, double x)
{
  int emin = t == NPU_DT_MXFP8 ? -6 : t == NPU_DT_FP8_E5M2 ? -14 : 0;
  int mbits = t == NPU_DT_MXFP8 ? 3 : t == NPU_DT_FP8_E5M2 ? 2 : 1;
  int e = x == 0 ? emin : ilogb(x);
  if (e < emin) e = emin;
  return ldexp(1.0, e - mbits - 1);
}

Test(mx, random_blocks_round_trip_within_half_an_element_ulp)
{
  static double in[MAXN];
  enum npu_dtype types[3] = {NPU_DT_MXFP8, NPU_DT_MXFP4, NPU_DT_FP8_E5M2};
  uint64_t seed = 0x3E8;
  size_t n = 32 * 100 + 7;
  for (int k = 0; k < 3; k++) {
    enum npu_dtype t = types[k];
    double elem_max = t == NPU_DT_MXFP8 ? 448 : t == NPU_DT_FP8_E5M2 ? 57344 : 6;
    int emax = t == NPU_DT_MXFP8 ? 8 : t == NPU_DT_FP8_E5M2 ? 15 : 2;
    for (int rep = 0; rep < 5; rep++) {
      for (size_t i = 0; i < n; i++) in[i] = ref_random(&seed, -12 - rep * 20, 12 + rep * 20);
      run(t, in, n, elems, scales, out);
      for (size_t b = 0; b < fmt_mx_scale_count(n); b++) {
        double amax = 0;
        size_t end = (b + 1) * 32 < n ? (b + 1) * 32 : n;
        for (size_t i = b * 32; i < end; i++) amax = fmax(amax, fabs(in[i]));
        int shared = ilogb(amax) - emax;
        shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
        cr_assert_eq(scales[b], shared + 127, "block %zu", b);
        double x_scale = ldexp(1.0, shared);
        for (size_t i = b * 32; i < end; i++) {
          double x = in[i] / x_scale;
          double q = out[i] / x_scale;
          if (fabs(x) > elem_max)
            cr_assert_eq(q, copysign(elem_max, x), "clipped element %zu", i);
          else
            cr_assert_leq(fabs(q - x), half_ulp(t, x), "element %zu: %a vs %a", i, out[i],
                          in[i]);
        }
      }
    }
  }
}

Test(mx, e5m2_elements)
{
  double in[32];
  for (int i = 0; i < 32; i++) in[i] = (i % 2 ? -1 : 1) * (i + 1) / 4.0; /* max 8 */
  /* E5M2: floor(log2 8) - 15 = -12, so 8 becomes 2^15 and each element is in[i] * 2^12 rounded
   * to 2 fraction bits. */
  run(NPU_DT_FP8_E5M2, in, 32, elems, scales, out);
  cr_assert_eq(scales[0], 127 - 12);
  cr_assert_eq(elems[31], 0x78 | 0x80, "8 / 2^-12 = 2^15 (exponent field 30), negative");
  for (int i = 0; i < 32; i++)
    cr_assert_eq(out[i], fmt_round(NPU_DT_FP8_E5M2, in[i] * 4096) / 4096, "element %d", i);
  /* 7.99 scales by 2^13 to 65454, past E5M2's 57344: saturates, never Inf */
  double clip[2] = {7.99, -7.99};
  run(NPU_DT_FP8_E5M2, clip, 2, elems, scales, out);
  cr_assert_eq(scales[0], 127 + 2 - 15);
  cr_assert_eq(out[0], 57344.0 * 0x1p-13);
  cr_assert_eq(out[1], -57344.0 * 0x1p-13);
}

Test(mx, element_dtypes_match_the_mx_dtypes)
{
  static double in[MAXN];
  static uint8_t e2[MAXN + 1], s2[MAXN / 32 + 2];
  uint64_t seed = 0x51;
  size_t n = 32 * 40 + 9;
  for (size_t i = 0; i < n; i++) in[i] = ref_random(&seed, -30, 30);
  const enum npu_dtype pairs[2][2] = {{NPU_DT_MXFP8, NPU_DT_FP8_E4M3}, {NPU_DT_MXFP4, NPU_DT_FP4_E2M1}};
  for (int p = 0; p < 2; p++) {
    fmt_mx_quantize(pairs[p][0], in, n, elems, scales);
    fmt_mx_quantize(pairs[p][1], in, n, e2, s2);
    cr_assert_eq(memcmp(elems, e2, fmt_bytes(pairs[p][0], n)), 0, "%s elements", npu_dtype_name(pairs[p][1]));
    cr_assert_eq(memcmp(scales, s2, fmt_mx_scale_count(n)), 0, "%s scales", npu_dtype_name(pairs[p][1]));
  }
}

/* Whether code c of t's element format is finite (not NaN or Inf). */
static bool finite_code(enum npu_dtype t, uint8_t c)
{
  if (four_bit(t)) return c < 16;
  return isfinite(code_value(t, c));
}

/* Every finite code of every element type, at every finite scale, next to the largest code of
 * the format (which fixes the block's scale): quantizing their values gives back the same
 * scale and the same codes, and dequantizing gives back the values. */
Test(mx, every_element_code_round_trips_at_every_scale)
{
  static const enum npu_dtype types[3] = {NPU_DT_FP8_E4M3, NPU_DT_FP8_E5M2, NPU_DT_FP4_E2M1};
  static const uint8_t top[3] = {0x7E, 0x7B, 0x7}; /* 448, 57344, 6 */
  for (int k = 0; k < 3; k++) {
    enum npu_dtype t = types[k];
    int ncodes = four_bit(t) ? 16 : 256;
    for (int c = 0; c < ncodes; c++) {
      if (!finite_code(t, (uint8_t)c)) continue;
      for (int s = 0; s < 255; s++) {
        double in[2] = {ldexp(code_value(t, top[k]), s - 127), ldexp(code_value(t, (uint8_t)c), s - 127)};
        uint8_t e[2] = {0, 0}, sc[1];
        fmt_mx_quantize(t, in, 2, e, sc);
        cr_assert_eq(sc[0], s, "%s code 0x%x scale %d", npu_dtype_name(t), c, s);
        cr_assert_eq(elem_code(t, e, 0), top[k]);
        cr_assert_eq(elem_code(t, e, 1), c, "%s code 0x%x scale %d", npu_dtype_name(t), c, s);
        double back[2];
        fmt_mx_dequantize(t, e, sc, 2, back);
        cr_assert(back[1] == in[1] && signbit(back[1]) == signbit(in[1]), "%s code 0x%x scale %d",
                  npu_dtype_name(t), c, s);
      }
    }
  }
}
