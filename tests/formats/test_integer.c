/*
 * test_integer.c - int4, int8, int16, int32, uint8: ties to even, saturation, NaN -> 0, every
 * code of the narrow types, and random doubles against C's nearbyint in round-to-nearest.
 */
#include <criterion/criterion.h>
#include <fenv.h>
#include <math.h>
#include <stdint.h>

#include "formats/formats.h"
#include "ref.h"

TestSuite(integer, .timeout = 30);

Test(integer, ties_go_to_even)
{
  static const struct {
    double in, out;
  } cases[] = {{0.5, 0},   {1.5, 2},    {2.5, 2},     {3.5, 4},   {-0.5, 0},  {-1.5, -2},
               {-2.5, -2}, {126.5, 126}, {-127.5, -128}, {2.4999, 2}, {2.5001, 3}, {-2.5001, -3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_assert_eq(fmt_int8_from_double(cases[i].in), cases[i].out, "%g", cases[i].in);
    cr_assert_eq(fmt_int16_from_double(cases[i].in), cases[i].out, "%g", cases[i].in);
    cr_assert_eq(fmt_int32_from_double(cases[i].in), cases[i].out, "%g", cases[i].in);
  }
  cr_assert_eq(fmt_uint8_from_double(2.5), 2);
  cr_assert_eq(fmt_uint8_from_double(254.5), 254);
  cr_assert_eq(fmt_uint8_from_double(253.5), 254);
  cr_assert_eq(fmt_int4_to_double(fmt_int4_from_double(5.5)), 6);
  cr_assert_eq(fmt_int4_to_double(fmt_int4_from_double(6.5)), 6);
  cr_assert_eq(fmt_int4_to_double(fmt_int4_from_double(-6.5)), -6);
  cr_assert_eq(fmt_int4_to_double(fmt_int4_from_double(-7.5)), -8);
  cr_assert_eq(fmt_int32_from_double(2147483646.5), 2147483646);
  cr_assert_eq(fmt_int32_from_double(-2147483647.5), -2147483648.0);
  /* -0.4 rounds to zero, and the decoded zero is +0. */
  cr_assert(!signbit(fmt_round(NPU_DT_INT8, -0.4)));
}

Test(integer, saturates_to_the_range)
{
  cr_assert_eq(fmt_int8_from_double(127.4), 127);
  cr_assert_eq(fmt_int8_from_double(127.5), 127);
  cr_assert_eq(fmt_int8_from_double(1000), 127);
  cr_assert_eq(fmt_int8_from_double(-128.5), -128);
  cr_assert_eq(fmt_int8_from_double(-1e300), -128);
  cr_assert_eq(fmt_int8_from_double(INFINITY), 127);
  cr_assert_eq(fmt_int8_from_double(-INFINITY), -128);
  cr_assert_eq(fmt_uint8_from_double(-0.6), 0);
  cr_assert_eq(fmt_uint8_from_double(-1), 0);
  cr_assert_eq(fmt_uint8_from_double(-INFINITY), 0);
  cr_assert_eq(fmt_uint8_from_double(255.5), 255);
  cr_assert_eq(fmt_uint8_from_double(300), 255);
  cr_assert_eq(fmt_uint8_from_double(INFINITY), 255);
  cr_assert_eq(fmt_int16_from_double(32767.5), 32767);
  cr_assert_eq(fmt_int16_from_double(-32768.5), -32768);
  cr_assert_eq(fmt_int16_from_double(1e9), 32767);
  cr_assert_eq(fmt_int32_from_double(2147483647.5), 2147483647);
  cr_assert_eq(fmt_int32_from_double(-2147483648.5), -2147483648.0);
  cr_assert_eq(fmt_int32_from_double(1e20), 2147483647);
  cr_assert_eq(fmt_int32_from_double(-INFINITY), -2147483648.0);
  cr_assert_eq(fmt_int4_from_double(7.5), 0x7);
  cr_assert_eq(fmt_int4_from_double(100), 0x7);
  cr_assert_eq(fmt_int4_from_double(-8.5), 0x8);
  cr_assert_eq(fmt_int4_from_double(-9), 0x8);
  cr_assert_eq(fmt_int4_from_double(-1), 0xF);
  cr_assert_eq(fmt_int4_from_double(-INFINITY), 0x8);
}

Test(integer, nan_is_zero)
{
  double nans[] = {NAN, copysign(NAN, -1.0)};
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(fmt_int8_from_double(nans[i]), 0);
    cr_assert_eq(fmt_uint8_from_double(nans[i]), 0);
    cr_assert_eq(fmt_int16_from_double(nans[i]), 0);
    cr_assert_eq(fmt_int32_from_double(nans[i]), 0);
    cr_assert_eq(fmt_int4_from_double(nans[i]), 0);
  }
}

Test(integer, every_code_round_trips)
{
  for (int c = 0; c < 16; c++) {
    double v = fmt_int4_to_double((uint8_t)c);
    cr_assert_eq(v, c < 8 ? c : c - 16);
    cr_assert_eq(fmt_int4_from_double(v), c);
    cr_assert_eq(fmt_int4_to_double((uint8_t)(c | 0xF0)), v, "high nibble must be ignored");
  }
  for (int i = INT8_MIN; i <= INT8_MAX; i++)
    cr_assert_eq(fmt_int8_from_double(fmt_int8_to_double((int8_t)i)), i);
  for (int i = 0; i <= UINT8_MAX; i++)
    cr_assert_eq(fmt_uint8_from_double(fmt_uint8_to_double((uint8_t)i)), i);
  for (int i = INT16_MIN; i <= INT16_MAX; i++)
    cr_assert_eq(fmt_int16_from_double(fmt_int16_to_double((int16_t)i)), i);
  cr_assert_eq(fmt_int32_to_double(INT32_MIN), -2147483648.0);
  cr_assert_eq(fmt_int32_from_double(fmt_int32_to_double(INT32_MAX)), INT32_MAX);
}

Test(integer, random_doubles_match_nearbyint)
{
  cr_assert_eq(fegetround(), FE_TONEAREST);
  uint64_t seed = 0x1A7;
  for (int i = 0; i < 200000; i++) {
    double v = ref_random(&seed, -3, 33);
    double r = nearbyint(v);
    double want32 = fmin(fmax(r, INT32_MIN), INT32_MAX);
    double want8 = fmin(fmax(r, INT8_MIN), INT8_MAX);
    double wantu8 = fmin(fmax(r, 0), UINT8_MAX);
    cr_assert_eq(fmt_int32_from_double(v), want32, "%a", v);
    cr_assert_eq(fmt_int8_from_double(v), want8, "%a", v);
    cr_assert_eq(fmt_uint8_from_double(v), wantu8, "%a", v);
  }
}
