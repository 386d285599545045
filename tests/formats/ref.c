/* ref.c - independent references for the formats tests; see ref.h. */
#include "ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t ref_next(uint64_t *state)
{
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

double ref_random(uint64_t *state, int emin, int emax)
{
  uint64_t r = ref_next(state);
  int e = emin + (int)(ref_next(state) % (uint64_t)(emax - emin + 1));
  int keep = (int)(ref_next(state) % 53); /* leading fraction bits kept */
  uint64_t frac = r & ((UINT64_C(1) << 52) - 1);
  frac &= ~((UINT64_C(1) << (52 - keep)) - 1);
  double v = ldexp(1.0 + ldexp((double)frac, -52), e);
  return (r >> 63) ? -v : v;
}

struct ref_grid ref_grid_make(double (*dec)(uint32_t), uint32_t last)
{
  struct ref_grid g = {0, 0, NULL, NULL};
  for (uint32_t c = 0; c <= last; c++) {
    double v = dec(c);
    cr_assert(g.n == 0 || v > g.val[g.n - 1], "grid not increasing at code 0x%x", c);
    ref_grid_push(&g, v, c);
  }
  return g;
}

void ref_grid_push(struct ref_grid *g, double val, uint32_t code)
{
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 64;
    g->val = realloc(g->val, g->cap * sizeof *g->val);
    g->code = realloc(g->code, g->cap * sizeof *g->code);
    cr_assert(g->val != NULL && g->code != NULL);
  }
  g->val[g->n] = val;
  g->code[g->n] = code;
  g->n++;
}

void ref_grid_sort(struct ref_grid *g)
{
  /* Insertion sort: grids sorted this way are small (HiFloat8: 128 entries). */
  for (size_t i = 1; i < g->n; i++)
    for (size_t j = i; j > 0 && g->val[j - 1] > g->val[j]; j--) {
      double v = g->val[j];
      uint32_t c = g->code[j];
      g->val[j] = g->val[j - 1];
      g->code[j] = g->code[j - 1];
      g->val[j - 1] = v;
      g->code[j - 1] = c;
    }
}

void ref_grid_free(struct ref_grid *g)
{
  free(g->val);
  free(g->code);
  g->val = NULL;
  g->code = NULL;
  g->n = g->cap = 0;
}

size_t ref_nearest(const struct ref_grid *g, double a, bool ties_away)
{
  size_t lo = 0, hi = g->n; /* largest i with val[i] <= a is in [lo, hi) */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (g->val[mid] <= a) lo = mid;
    else hi = mid;
  }
  if (lo + 1 == g->n) return lo;
  /* Adjacent values are within a factor of 2, so both differences are exact (Sterbenz). */
  double below = a - g->val[lo], above = g->val[lo + 1] - a;
  if (below < above) return lo;
  if (above < below) return lo + 1;
  if (ties_away) return lo + 1;
  return (g->code[lo] & 1) == 0 ? lo : lo + 1;
}

double ref_rne_bits(double v, int frac_bits)
{
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  int drop = 52 - frac_bits;
  uint64_t bias = (UINT64_C(1) << (drop - 1)) - 1 + ((b >> drop) & 1);
  b = (b + bias) >> drop << drop;
  memcpy(&v, &b, sizeof v);
  return v;
}
