/*
 * test_hif8.c - HiFloat8: every code, the value set against the paper's definition built
 * independently here, field examples, ties away from zero at every halfway point, overflow to
 * Inf, underflow to the single zero, NaN, and random doubles against nearest-value search.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "formats/formats.h"
#include "ref.h"

TestSuite(hif8, .timeout = 30);

static double dec(uint32_t c)
{
  return fmt_hif8_to_double((uint8_t)c);
}

/* The positive finite values and their codes, sorted by value. */
static struct ref_grid sorted_grid(void)
{
  struct ref_grid g = {0, 0, NULL, NULL};
  for (uint32_t c = 0; c < 0x80; c++)
    if (isfinite(dec(c))) ref_grid_push(&g, dec(c), c);
  ref_grid_sort(&g);
  return g;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

Test(hif8, every_code_round_trips)
{
  for (uint32_t c = 0; c < 256; c++) {
    double v = dec(c);
    if (c == 0x80) {
      cr_assert(isnan(v));
      continue;
    }
    cr_assert(!isnan(v), "code 0x%02x", c);
    cr_assert_eq(fmt_hif8_from_double(v), c, "0x%02x -> %a -> 0x%02x", c, v,
                 fmt_hif8_from_double(v));
    if (c > 0x80) cr_assert_eq(v, -dec(c & 0x7F), "0x%02x is not minus 0x%02x", c, c & 0x7F);
  }
}

Test(hif8, value_set_is_the_papers)
{
  /* arXiv 2409.16626: exponents 0..+-3 carry 3 mantissa bits, +-4..+-7 two, +-8..+-15 one;
   * denormals 2^-22..2^-16; 1.5 * 2^15 is Inf. Built here from that table alone. */
  double want[160];
  int n = 0;
  for (int e = -22; e <= -16; e++) want[n++] = ldexp(1.0, e);
  for (int e = -15; e <= 15; e++) {
    int m = abs(e) <= 3 ? 3 : abs(e) <= 7 ? 2 : 1;
    for (int k = 0; k < 1 << m; k++)
      if (!(e == 15 && k == 1)) want[n++] = ldexp(1.0 + ldexp(k, -m), e);
  }
  qsort(want, (size_t)n, sizeof want[0], cmp_double);
  cr_assert_eq(n, 126);

  struct ref_grid g = sorted_grid();
  cr_assert_eq(g.n, 127); /* the 126 above and zero */
  cr_assert_eq(g.val[0], 0.0);
  for (int i = 0; i < n; i++)
    cr_assert_eq(g.val[i + 1], want[i], "value %d: %a, expected %a", i, g.val[i + 1], want[i]);
  ref_grid_free(&g);
}

Test(hif8, spot_codes)
{
  cr_assert_eq(dec(0x00), 0.0);
  cr_assert(!signbit(dec(0x00)));
  cr_assert(isnan(dec(0x80)));
  cr_assert_eq(dec(0x6F), INFINITY);
  cr_assert_eq(dec(0xEF), -INFINITY);
  cr_assert_eq(dec(0x6E), 32768.0); /* max: dot 11, E = +15, M = 0 */
  cr_assert_eq(dec(0x01), 0x1p-22); /* min denormal */
  cr_assert_eq(dec(0x07), 0x1p-16); /* max denormal */
  cr_assert_eq(dec(0x7E), 0x1p-15); /* min normal: dot 11, E = -15 */
  cr_assert_eq(dec(0x7F), 0x1.8p-15);
  cr_assert_eq(dec(0x08), 1.0);      /* dot 0001 */
  cr_assert_eq(dec(0x0F), 1.875);
  cr_assert_eq(dec(0x10), 2.0);      /* dot 001, E = +1 */
  cr_assert_eq(dec(0x18), 0.5);      /* dot 001, E = -1 */
  cr_assert_eq(dec(0x2E), 14.0);     /* Ascend C's example: dot 01, E = 3, M = 0.75 */
  cr_assert_eq(dec(0x40), 16.0);     /* dot 10, E = +4, 2 mantissa bits */
  cr_assert_eq(dec(0x41), 20.0);
  cr_assert_eq(dec(0x60), 256.0);    /* dot 11, E = +8, 1 mantissa bit */
  cr_assert_eq(dec(0x61), 384.0);
  cr_assert_eq(dec(0xAE), -14.0);
  cr_assert_eq(fmt_hif8_from_double(14.0), 0x2E);
  cr_assert_eq(fmt_hif8_from_double(-0.5), 0x98);
}

Test(hif8, every_halfway_point_rounds_away_from_zero)
{
  struct ref_grid g = sorted_grid();
  for (size_t i = 0; i + 1 < g.n; i++) {
    double lo = g.val[i], hi = g.val[i + 1];
    double mid = (lo + hi) / 2;
    uint32_t lo_code = g.code[i], hi_code = g.code[i + 1];
    cr_assert_eq(fmt_hif8_from_double(mid), hi_code, "%a (between %a and %a)", mid, lo, hi);
    cr_assert_eq(fmt_hif8_from_double(nextafter(mid, 0)), lo_code, "just below %a", mid);
    cr_assert_eq(fmt_hif8_from_double(nextafter(mid, INFINITY)), hi_code, "just above %a", mid);
    cr_assert_eq(fmt_hif8_from_double(-mid), hi_code | 0x80, "-%a", mid);
    cr_assert_eq(fmt_hif8_from_double(-nextafter(mid, 0)), lo_code ? lo_code | 0x80 : 0,
                 "just above -%a", mid);
  }
  ref_grid_free(&g);
}

Test(hif8, overflow_underflow_zero_nan)
{
  /* Inf sits where 1.5 * 2^15 would be: rounding to it from 1.25 * 2^15 = 40960 up. */
  cr_assert_eq(fmt_hif8_from_double(40960.0), 0x6F);
  cr_assert_eq(fmt_hif8_from_double(nextafter(40960.0, 0)), 0x6E);
  cr_assert_eq(fmt_hif8_from_double(-40960.0), 0xEF);
  cr_assert_eq(fmt_hif8_from_double(65536.0), 0x6F);
  cr_assert_eq(fmt_hif8_from_double(1e300), 0x6F);
  cr_assert_eq(fmt_hif8_from_double(-1e300), 0xEF);
  cr_assert_eq(fmt_hif8_from_double(INFINITY), 0x6F);
  cr_assert_eq(fmt_hif8_from_double(-INFINITY), 0xEF);
  /* Below 2^-22 the candidates are 0 and 2^-22; the tie 2^-23 goes away from zero. */
  cr_assert_eq(fmt_hif8_from_double(0x1p-23), 0x01);
  cr_assert_eq(fmt_hif8_from_double(nextafter(0x1p-23, 0)), 0x00);
  cr_assert_eq(fmt_hif8_from_double(-0x1p-23), 0x81);
  cr_assert_eq(fmt_hif8_from_double(-0x1p-24), 0x00); /* one zero: no -0 */
  cr_assert_eq(fmt_hif8_from_double(-1e-300), 0x00);
  cr_assert_eq(fmt_hif8_from_double(-0.0), 0x00);
  cr_assert_eq(fmt_hif8_from_double(0.0), 0x00);
  cr_assert_eq(fmt_hif8_from_double(NAN), 0x80);
  cr_assert_eq(fmt_hif8_from_double(copysign(NAN, -1.0)), 0x80);
  /* Denormal binades round linearly: 1.5 * 2^-20 is the tie between 2^-20 and 2^-19. */
  cr_assert_eq(fmt_hif8_from_double(0x1.8p-20), 0x04);
  cr_assert_eq(fmt_hif8_from_double(0x1.7p-20), 0x03);
}

Test(hif8, random_doubles_match_nearest_value_search)
{
  struct ref_grid g = sorted_grid();
  ref_grid_push(&g, 49152.0, 0x6F); /* the Inf pattern's place: 1.5 * 2^15 */
  uint64_t seed = 0x41F8;
  for (int i = 0; i < 200000; i++) {
    double v = ref_random(&seed, -26, 17);
    double a = fabs(v);
    uint32_t want = g.code[ref_nearest(&g, a, true)];
    if (want != 0 && signbit(v)) want |= 0x80;
    cr_assert_eq(fmt_hif8_from_double(v), want, "%a gave 0x%02x, reference 0x%02x", v,
                 fmt_hif8_from_double(v), want);
  }
  ref_grid_free(&g);
}
