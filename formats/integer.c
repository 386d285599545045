/*
 * integer.c - integer element types: int4, int8, int16, int32 (two's complement) and uint8.
 *
 * Conversion from a real value follows what the NPU's float-to-integer casts do in their
 * round-to-nearest-even mode with saturation (Ascend C RoundMode::CAST_RINT; IEEE 754
 * roundTiesToEven applied to integers): round to the nearest integer, ties to even, clamp to
 * the type's range (infinities included), NaN -> 0. int4 is a two's complement nibble,
 * [-8, 7], packed two per byte by the caller (formats.c).
 */
#include "formats/formats.h"

#include <math.h>

#include "formats/formats_int.h"

/* @v rounded to an integer (RNE) and clamped to [lo, hi]; NaN -> 0; never -0. */
static double round_saturate(double v, double lo, double hi)
{
  if (isnan(v)) return 0;
  if (v <= lo) return lo;
  if (v >= hi) return hi;
  /* lo < v < hi with lo, hi integers: the rounded value stays in [lo, hi]. */
  double r = fmt__round_quantum(fabs(v), 0, FMT__TIES_EVEN);
  return v < 0 ? -r + 0.0 : r;
}

int8_t fmt_int8_from_double(double v)
{
  return (int8_t)round_saturate(v, INT8_MIN, INT8_MAX);
}

double fmt_int8_to_double(int8_t i)
{
  return i;
}

uint8_t fmt_uint8_from_double(double v)
{
  return (uint8_t)round_saturate(v, 0, UINT8_MAX);
}

double fmt_uint8_to_double(uint8_t u)
{
  return u;
}

int16_t fmt_int16_from_double(double v)
{
  return (int16_t)round_saturate(v, INT16_MIN, INT16_MAX);
}

double fmt_int16_to_double(int16_t i)
{
  return i;
}

int32_t fmt_int32_from_double(double v)
{
  return (int32_t)round_saturate(v, INT32_MIN, INT32_MAX);
}

double fmt_int32_to_double(int32_t i)
{
  return i;
}

uint8_t fmt_int4_from_double(double v)
{
  int i = (int)round_saturate(v, -8, 7);
  return (uint8_t)(i & 0xF);
}

double fmt_int4_to_double(uint8_t c)
{
  int n = c & 0xF;
  return n >= 8 ? n - 16 : n;
}
