/*
 * hif8.c - HiFloat8 (HiF8), Huawei's 8-bit tapered-precision floating-point format.
 *
 * Source: Y. Luo et al., "Ascend HiFloat8 Format for Deep Learning", arXiv 2409.16626 (2024),
 * cross-checked against Huawei's public code: CANN opbase include/nnopbase/opdev/hifloat8.h
 * (decoding, and HiFloat8::BitsFromFp32 with "TA rounding"), CANN asc-tools
 * cpudebug/include/kernel_hif8.h (the field table) and MindSpore core/base/hifloat8.h
 * (decoding; its encoder truncates and is not followed).
 *
 * A code is S | Dot | E | M. The dot field is a prefix code giving D, the exponent width:
 *   dot 0000 -> denormal mode: no E; the 3-bit M gives the value 2^(M - 23), M = 1..7,
 *               that is 2^-22 .. 2^-16 (M = 0: 0x00 is zero, 0x80 is NaN)
 *   dot 0001 -> D = 0: exponent 0,            3 mantissa bits
 *   dot 001  -> D = 1: exponent +-1,          3 mantissa bits
 *   dot 01   -> D = 2: exponent +-[2, 3],     3 mantissa bits
 *   dot 10   -> D = 3: exponent +-[4, 7],     2 mantissa bits
 *   dot 11   -> D = 4: exponent +-[8, 15],    1 mantissa bit
 * E is sign-magnitude: its first bit is the exponent's sign (1 = negative), the other D - 1
 * bits are the magnitude below its implicit leading 1 (magnitude = 2^(D-1) + bits). A normal
 * value is (-1)^S * 2^E * 1.M. The pattern S.11.0111.1 (1.5 * 2^15) is +-Inf, so the largest
 * finite value is 2^15 = 32768; the smallest positive is 2^-22. There is one zero, no -0.
 *
 * Rounding: HiF8's conversion rounds to nearest with ties away from zero ("TA", the paper's
 * rounding for HiF8, CANN's BitsFromFp32, and the "_rna" float-to-hifloat8 intrinsics of
 * Ascend C, e.g. __float22hif82_rna_sat). That is not the RNE of the other formats; it is what
 * the format defines. Values whose rounded magnitude exceeds 32768 - from 40960
 * (= 1.25 * 2^15) up - become +-Inf, as in CANN's reference conversion. Not modelled: the
 * hardware's optional saturating casts and its stochastic "hybrid" rounding (CAST_HYBRID).
 * Magnitudes below 2^-23 become 0; from 2^-23 up to 2^-22 they become 2^-22.
 */
#include "formats/formats.h"

#include <math.h>
#include <stdlib.h>

#include "formats/formats_int.h"

#define HIF8_NAN 0x80
#define HIF8_INF 0x6F            /* magnitude bits of +-Inf */
#define HIF8_MAX 32768.0         /* 2^15 */
#define HIF8_EMAX 15             /* largest normal exponent */
#define HIF8_EMIN_NORMAL (-15)   /* smallest normal exponent */
#define HIF8_EMIN (-22)          /* smallest denormal exponent */
#define HIF8_DENORMAL_BIAS 23    /* denormal value = 2^(M - 23) */

/* Dot-field prefix code for D = 0..4: its bits and its width. */
static const struct {
  unsigned bits, width;
} dot_field[5] = {{0x1, 4}, {0x1, 3}, {0x1, 2}, {0x2, 2}, {0x3, 2}};

/* Exponent width D for a normal exponent @e in [-15, 15]. */
static int exp_width(int e)
{
  int mag = abs(e);
  return mag == 0 ? 0 : fmt__floor_log2(mag) + 1;
}

/* Mantissa bits for the binade [2^e, 2^(e+1)), e in [-22, 15]: 7 - dot width - D when normal,
 * none in denormal mode. */
static int frac_bits(int e)
{
  if (e < HIF8_EMIN_NORMAL) return 0;
  int d = exp_width(e);
  return 7 - (int)dot_field[d].width - d;
}

/* Magnitude bits (0x01..0x7F) of a positive value @r of the format, r <= HIF8_MAX. */
static unsigned magnitude_code(double r)
{
  int e = fmt__floor_log2(r);
  if (e < HIF8_EMIN_NORMAL) return (unsigned)(e + HIF8_DENORMAL_BIAS); /* dot 0000, M */
  int d = exp_width(e);
  int fb = frac_bits(e);
  unsigned frac = (unsigned)(ldexp(r, fb - e) - ldexp(1.0, fb));
  unsigned exp_field = 0;
  if (d > 0) {
    unsigned mag = (unsigned)abs(e);
    exp_field = (e < 0 ? 1u : 0u) << (d - 1) | (mag - (1u << (d - 1)));
  }
  return dot_field[d].bits << (7 - dot_field[d].width) | exp_field << fb | frac;
}

uint8_t fmt_hif8_from_double(double v)
{
  if (isnan(v)) return HIF8_NAN;
  unsigned sign = signbit(v) ? 0x80 : 0;
  double a = fabs(v);
  if (a == 0) return 0;
  if (isinf(a)) return (uint8_t)(sign | HIF8_INF);
  int e = fmt__floor_log2(a);
  if (e > HIF8_EMAX) return (uint8_t)(sign | HIF8_INF);
  /* Below the smallest binade the candidates are 0 and 2^-22. */
  int qexp = e < HIF8_EMIN ? HIF8_EMIN : e - frac_bits(e);
  double r = fmt__round_quantum(a, qexp, FMT__TIES_AWAY);
  if (r == 0) return 0; /* HiF8 has no negative zero */
  if (r > HIF8_MAX) return (uint8_t)(sign | HIF8_INF);
  return (uint8_t)(sign | magnitude_code(r));
}

double fmt_hif8_to_double(uint8_t c)
{
  double s = c & 0x80 ? -1.0 : 1.0;
  unsigned b = c & 0x7F;
  if (c == HIF8_NAN) return NAN;
  if (b == HIF8_INF) return s * INFINITY;
  if (b < 0x08) return b == 0 ? 0.0 : s * ldexp(1.0, (int)b - HIF8_DENORMAL_BIAS);

  int d = b < 0x10 ? 0 : b < 0x20 ? 1 : (int)(b >> 5) + 1; /* dot 0001 / 001 / 01, 10, 11 */
  int fb = 7 - (int)dot_field[d].width - d;
  unsigned frac = b & ((1u << fb) - 1);
  int e = 0;
  if (d > 0) {
    unsigned exp_field = (b >> fb) & ((1u << d) - 1);
    int mag = (int)((1u << (d - 1)) | (exp_field & ((1u << (d - 1)) - 1)));
    e = exp_field >> (d - 1) ? -mag : mag;
  }
  return s * ldexp((double)((1u << fb) | frac), e - fb);
}
