/*
 * binary.c - sign / exponent / fraction floating-point formats: fp16, bf16, fp32, hf32, OCP
 * FP8 E4M3 and E5M2, OCP MX FP4 E2M1, as instances of one parameterised format.
 *
 * Sources:
 *   IEEE Std 754-2019, binary16 and binary32 (fp16, fp32): RNE, gradual underflow, overflow
 *     to infinity.
 *   bfloat16: binary32's sign and 8-bit exponent with the top 7 fraction bits (Google Brain /
 *     Intel BF16 definition); IEEE-style specials and subnormals, RNE. Rounded here straight
 *     from the double: rounding to fp32 first would round twice and miss some ties.
 *   HF32: Huawei Ascend's reduced-precision fp32 cube input (like NVIDIA TF32). The CANN ATC
 *     reference (--allow_hf32) says HF32 keeps fp32's range with an 11-bit mantissa; CANN's
 *     matmul golden model (float32_to_hf32, "E8M11: 1 sign + 8 exponent + 11 mantissa") keeps
 *     the top 11 fraction bits, treats fp32 subnormals as zero and carries into the exponent,
 *     up to infinity. Ascend C SetHF32(enable, transMode): transMode 0, the default, is round
 *     to nearest, ties to even (1 is ties away, or toward zero on later parts), so RNE here.
 *     The value is kept in a 32-bit container as an fp32 bit pattern whose low 12 bits are 0.
 *   OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (2023): E4M3 bias 7, no
 *     infinities, S.1111.111 the only NaN, max 448; E5M2 bias 15 with IEEE specials, max
 *     57344. Both have subnormals. The spec allows saturating and non-saturating conversions;
 *     npusim uses the saturating one (finite overflow -> +-max normal), the mode used for
 *     training. For E4M3 an infinite input also saturates (the format has no infinity); for
 *     E5M2 an infinite input stays infinite.
 *   OCP Microscaling Formats (MX) Specification v1.0 (2023), FP4 E2M1: bias 1, one subnormal
 *     (0.5), max 6, no Inf or NaN; conversions saturate. NaN has no encoding: npusim writes +0
 *     (inside an MX block a NaN sets the block's scale to NaN, see mx.c).
 */
#include "formats/formats.h"

#include <math.h>

#include "common/err.h"
#include "formats/formats_int.h"

const struct fmt__binary fmt__fp16 = {5, 10, 15, true, FMT__SPECIALS_IEEE, false, 0x7E00};
const struct fmt__binary fmt__bf16 = {8, 7, 127, true, FMT__SPECIALS_IEEE, false, 0x7FC0};
const struct fmt__binary fmt__fp32 = {8, 23, 127, true, FMT__SPECIALS_IEEE, false, 0x7FC00000};
const struct fmt__binary fmt__hf32_e8m11 = {8, 11, 127, false, FMT__SPECIALS_IEEE, false, 0x7FC00};
const struct fmt__binary fmt__e4m3 = {4, 3, 7, true, FMT__SPECIALS_NAN_ONLY, true, 0x7F};
const struct fmt__binary fmt__e5m2 = {5, 2, 15, true, FMT__SPECIALS_IEEE, true, 0x7E};
const struct fmt__binary fmt__e2m1 = {2, 1, 1, true, FMT__SPECIALS_NONE, true, 0};

double fmt__round_quantum(double a, int qexp, enum fmt__ties ties)
{
  /* Scaling by a power of two is exact here, and so is taking the fractional part. */
  double r = ldexp(a, -qexp);
  double n = floor(r);
  double frac = r - n;
  if (frac > 0.5 || (frac == 0.5 && (ties == FMT__TIES_AWAY || fmod(n, 2.0) != 0.0))) n += 1.0;
  return ldexp(n, qexp);
}

int fmt__floor_log2(double a)
{
  int e;
  NPU_ASSERT(a > 0 && isfinite(a));
  (void)frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  return e - 1;
}

static int emin_of(const struct fmt__binary *f)
{
  return 1 - f->bias;
}

/* Exponent of the largest finite binade. */
static int emax_of(const struct fmt__binary *f)
{
  int top = (1 << f->exp_bits) - 1; /* all-ones exponent field */
  return (f->specials == FMT__SPECIALS_IEEE ? top - 1 : top) - f->bias;
}

double fmt__binary_max(const struct fmt__binary *f)
{
  /* E4M3 gives up its largest significand to NaN; the others use all of it. */
  int lost = f->specials == FMT__SPECIALS_NAN_ONLY ? 1 : 0;
  return ldexp(2.0 - ldexp(1.0, lost - f->frac_bits), emax_of(f));
}

double fmt__binary_min(const struct fmt__binary *f)
{
  return ldexp(1.0, f->subnormals ? emin_of(f) - f->frac_bits : emin_of(f));
}

/* Magnitude bits of @r, a value of @f in [0, max]. */
static uint32_t magnitude_code(const struct fmt__binary *f, double r)
{
  if (r == 0) return 0;
  int e = fmt__floor_log2(r);
  if (e < emin_of(f)) return (uint32_t)ldexp(r, f->frac_bits - emin_of(f)); /* subnormal */
  uint32_t frac = (uint32_t)(ldexp(r, f->frac_bits - e) - ldexp(1.0, f->frac_bits));
  return (uint32_t)(e + f->bias) << f->frac_bits | frac;
}

uint32_t fmt__binary_encode(const struct fmt__binary *f, double v)
{
  uint32_t sign = signbit(v) ? UINT32_C(1) << (f->exp_bits + f->frac_bits) : 0;
  uint32_t inf_code = (UINT32_C(1) << f->exp_bits) - 1;
  inf_code <<= f->frac_bits;
  double max = fmt__binary_max(f);

  if (isnan(v)) return f->specials == FMT__SPECIALS_NONE ? 0 : sign | f->nan_code;
  double a = fabs(v);
  if (isinf(a))
    return sign | (f->specials == FMT__SPECIALS_IEEE ? inf_code : magnitude_code(f, max));

  double r = 0;
  if (a != 0) {
    int e = fmt__floor_log2(a);
    if (e < emin_of(f) && f->subnormals) e = emin_of(f); /* subnormal spacing */
    r = fmt__round_quantum(a, e - f->frac_bits, FMT__TIES_EVEN);
    if (!f->subnormals && r < ldexp(1.0, emin_of(f))) r = 0; /* flush to signed zero */
  }
  if (r > max) {
    NPU_ASSERT(f->saturate || f->specials == FMT__SPECIALS_IEEE);
    return sign | (f->saturate ? magnitude_code(f, max) : inf_code);
  }
  return sign | magnitude_code(f, r);
}

double fmt__binary_decode(const struct fmt__binary *f, uint32_t code)
{
  uint32_t frac_mask = (UINT32_C(1) << f->frac_bits) - 1;
  uint32_t exp_mask = (UINT32_C(1) << f->exp_bits) - 1;
  uint32_t frac = code & frac_mask;
  uint32_t ef = (code >> f->frac_bits) & exp_mask;
  double s = (code >> (f->exp_bits + f->frac_bits)) & 1 ? -1.0 : 1.0;

  if (f->specials == FMT__SPECIALS_IEEE && ef == exp_mask)
    return frac != 0 ? copysign(NAN, s) : s * INFINITY;
  if (f->specials == FMT__SPECIALS_NAN_ONLY && ef == exp_mask && frac == frac_mask)
    return copysign(NAN, s);
  if (ef == 0) return f->subnormals ? s * ldexp((double)frac, emin_of(f) - f->frac_bits) : s * 0.0;
  return s * ldexp((double)(frac | (frac_mask + 1)), (int)ef - f->bias - f->frac_bits);
}

uint16_t fmt_fp16_from_double(double v)
{
  return (uint16_t)fmt__binary_encode(&fmt__fp16, v);
}

double fmt_fp16_to_double(uint16_t h)
{
  return fmt__binary_decode(&fmt__fp16, h);
}

uint16_t fmt_bf16_from_double(double v)
{
  return (uint16_t)fmt__binary_encode(&fmt__bf16, v);
}

double fmt_bf16_to_double(uint16_t b)
{
  return fmt__binary_decode(&fmt__bf16, b);
}

uint32_t fmt_fp32_from_double(double v)
{
  return fmt__binary_encode(&fmt__fp32, v);
}

double fmt_fp32_to_double(uint32_t f)
{
  return fmt__binary_decode(&fmt__fp32, f);
}

/* HF32's 20-bit code (sign at bit 19) <-> its fp32 container (sign at bit 31, low 12 bits 0). */
static uint32_t hf32_container(uint32_t code20)
{
  return (code20 >> 19) << 31 | (code20 & 0x7FFFF) << 12;
}

static uint32_t hf32_code20(uint32_t container)
{
  return (container >> 31) << 19 | ((container >> 12) & 0x7FFFF);
}

uint32_t fmt_hf32_from_double(double v)
{
  return hf32_container(fmt__binary_encode(&fmt__hf32_e8m11, v));
}

double fmt_hf32_to_double(uint32_t h)
{
  if ((h & 0xFFF) != 0) h = fmt_hf32_from_double(fmt_fp32_to_double(h)); /* fp32 -> HF32 */
  return fmt__binary_decode(&fmt__hf32_e8m11, hf32_code20(h));
}

uint8_t fmt_fp8_e4m3_from_double(double v)
{
  return (uint8_t)fmt__binary_encode(&fmt__e4m3, v);
}

double fmt_fp8_e4m3_to_double(uint8_t c)
{
  return fmt__binary_decode(&fmt__e4m3, c);
}

uint8_t fmt_fp8_e5m2_from_double(double v)
{
  return (uint8_t)fmt__binary_encode(&fmt__e5m2, v);
}

double fmt_fp8_e5m2_to_double(uint8_t c)
{
  return fmt__binary_decode(&fmt__e5m2, c);
}

uint8_t fmt_fp4_e2m1_from_double(double v)
{
  return (uint8_t)fmt__binary_encode(&fmt__e2m1, v);
}

double fmt_fp4_e2m1_to_double(uint8_t c)
{
  return fmt__binary_decode(&fmt__e2m1, c & 0xF);
}
