/*
 * mx.c - E8M0 scales and OCP Microscaling (MX) block quantization: MXFP8 (E4M3 or E5M2
 * elements) and MXFP4 (E2M1 elements), 32 elements per shared scale.
 *
 * Source: OCP Microscaling Formats (MX) Specification v1.0 (2023).
 *   - Section 5: an MX block is k = 32 elements P_i with one shared scale X; its values are
 *     X * P_i. X is E8M0: 8 exponent bits, bias 127, value 2^(e - 127) for e = 0..254; 0xFF is
 *     NaN, and a NaN scale makes every value of its block NaN.
 *   - Section 6.3, conversion of a vector of floats V to MX:
 *       shared_exp = floor(log2(max_i |V_i|)) - emax_elem
 *       X = 2^shared_exp
 *       P_i = quantize_to_element_format(V_i / X), normal values clamped to the element max
 *     with emax_elem the exponent of the element format's largest normal: 8 for E4M3 (448 =
 *     1.75 * 2^8), 15 for E5M2 (57344 = 1.75 * 2^15), 2 for E2M1 (6 = 1.5 * 2^2). The
 *     elements are rounded RNE and saturate (formats/binary.c).
 *   - Section 5.3 (MXFP8): the element type is FP8 E4M3 or E5M2. npusim's mxfp8 dtype names
 *     the E4M3 form; E5M2 blocks are asked for by their element type, fp8_e5m2.
 * Choices the spec leaves open, made here:
 *   - shared_exp is clamped to E8M0's range [-127, 127], so a block of tiny values keeps its
 *     elements as well as the smallest scale allows and a block beyond 2^135 saturates.
 *   - An all-zero block has no log2(max): it gets shared_exp = -127 (code 0, 2^-127) and zero
 *     elements (signs kept).
 *   - A block holding a NaN or an infinity gets the NaN scale 0xFF (its element codes are
 *     written as zero and mean nothing).
 *   - The last block may be partial (n not a multiple of 32); its scale uses its own elements.
 */
#include "formats/formats.h"

#include <math.h>

#include "common/err.h"
#include "formats/formats_int.h"

#define E8M0_BIAS 127
#define E8M0_EXP_MIN (-127)
#define E8M0_EXP_MAX 127

double fmt_e8m0_to_double(uint8_t e)
{
  return e == FMT_E8M0_NAN ? NAN : ldexp(1.0, (int)e - E8M0_BIAS);
}

uint8_t fmt_e8m0_from_exponent(int exp)
{
  if (exp < E8M0_EXP_MIN) exp = E8M0_EXP_MIN;
  if (exp > E8M0_EXP_MAX) exp = E8M0_EXP_MAX;
  return (uint8_t)(exp + E8M0_BIAS);
}

size_t fmt_mx_scale_count(size_t n)
{
  return n / FMT_MX_BLOCK + (n % FMT_MX_BLOCK != 0);
}

/* emax_elem of the element format of @t (an MX dtype or an MX element dtype). */
static int emax_elem(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_MXFP8:
  case NPU_DT_FP8_E4M3: return 8;
  case NPU_DT_FP8_E5M2: return 15;
  case NPU_DT_MXFP4:
  case NPU_DT_FP4_E2M1: return 2;
  default: NPU_PANIC("%s is not an MX element type", npu_dtype_name(t));
  }
}

void fmt_mx_quantize(enum npu_dtype t, const double *in, size_t n, void *elems, uint8_t *scales)
{
  int emax = emax_elem(t);
  NPU_ASSERT(n == 0 || (in != NULL && elems != NULL && scales != NULL));
  for (size_t b0 = 0; b0 < n; b0 += FMT_MX_BLOCK) {
    size_t b1 = n - b0 < FMT_MX_BLOCK ? n : b0 + FMT_MX_BLOCK;
    double amax = 0;
    bool special = false;
    for (size_t i = b0; i < b1; i++) {
      if (!isfinite(in[i])) special = true;
      else if (fabs(in[i]) > amax) amax = fabs(in[i]);
    }
    if (special) {
      scales[b0 / FMT_MX_BLOCK] = FMT_E8M0_NAN;
      for (size_t i = b0; i < b1; i++) fmt_encode(t, elems, i, 0.0);
      continue;
    }
    int shared_exp = amax == 0 ? E8M0_EXP_MIN : fmt__floor_log2(amax) - emax;
    uint8_t scale = fmt_e8m0_from_exponent(shared_exp);
    shared_exp = (int)scale - E8M0_BIAS; /* after clamping */
    scales[b0 / FMT_MX_BLOCK] = scale;
    /* V_i / X is a power-of-two scaling: exact unless it leaves double's range, where the
     * element rounds to zero anyway. */
    for (size_t i = b0; i < b1; i++) fmt_encode(t, elems, i, ldexp(in[i], -shared_exp));
  }
}

void fmt_mx_dequantize(enum npu_dtype t, const void *elems, const uint8_t *scales, size_t n,
                       double *out)
{
  (void)emax_elem(t); /* checks t */
  NPU_ASSERT(n == 0 || (elems != NULL && scales != NULL && out != NULL));
  for (size_t i = 0; i < n; i++) {
    uint8_t scale = scales[i / FMT_MX_BLOCK];
    out[i] = scale == FMT_E8M0_NAN ? NAN
                                   : ldexp(fmt_decode(t, elems, i), (int)scale - E8M0_BIAS);
  }
}
