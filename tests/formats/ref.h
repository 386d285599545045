/*
 * ref.h - independent references for the formats tests: a seeded random source of doubles
 * that hits ties and binade edges often, and round-to-nearest by search over a format's
 * sorted value list (no use of the library's rounding code).
 */
#ifndef NPUSIM_TESTS_FORMATS_REF_H
#define NPUSIM_TESTS_FORMATS_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Next value of a splitmix64 stream; the state is the seed, advanced in place. */
uint64_t ref_next(uint64_t *state);

/*
 * A random double with random sign and binary exponent uniform in [emin, emax]; its
 * significand keeps a random number of leading bits (0..52), so exact ties between values of
 * narrow formats come up often.
 */
double ref_random(uint64_t *state, int emin, int emax);

/* The non-negative values of a format in increasing order, each with its code. */
struct ref_grid {
  size_t n, cap;
  double *val;
  uint32_t *code;
};

/* Grid of codes 0..last of decoder @dec, which must be increasing (checked). Owned by caller. */
struct ref_grid ref_grid_make(double (*dec)(uint32_t), uint32_t last);

/* Append a value and code (e.g. a virtual top: the overflow threshold and the Inf code). */
void ref_grid_push(struct ref_grid *g, double val, uint32_t code);

/* Sort the grid by value (for formats whose codes are not ordered, like HiFloat8). */
void ref_grid_sort(struct ref_grid *g);

void ref_grid_free(struct ref_grid *g);

/*
 * Index of the grid value nearest to @a >= 0 (the last one if @a is beyond it). A tie goes to
 * the even code, or with @ties_away to the larger value.
 */
size_t ref_nearest(const struct ref_grid *g, double a, bool ties_away);

/*
 * @v rounded to @frac_bits fraction bits, ties to even, by integer arithmetic on its binary64
 * pattern (carry into the exponent included). Valid when the result is a normal number of
 * the target format; no range handling.
 */
double ref_rne_bits(double v, int frac_bits);

#endif
