/*
 * formats_int.h - folder-private pieces of formats/: the exact rounding step every encoder
 * shares, and the parameterised IEEE-style binary format that fp16, bf16, fp32, hf32, E4M3,
 * E5M2 and E2M1 are instances of.
 */
#ifndef NPUSIM_FORMATS_FORMATS_INT_H
#define NPUSIM_FORMATS_FORMATS_INT_H

#include <stdbool.h>
#include <stdint.h>

/* How a rounding step breaks a tie. */
enum fmt__ties {
  FMT__TIES_EVEN, /* IEEE roundTiesToEven */
  FMT__TIES_AWAY  /* roundTiesToAway (HiFloat8's "TA") */
};

/*
 * fmt__round_quantum - @a (finite, >= 0) rounded to the nearest integer multiple of 2^@qexp,
 * ties broken by @ties. Exact: the result is the correctly rounded value, as a double.
 * Requires a / 2^qexp < 2^53 or a already a multiple of 2^qexp (true for every caller).
 */
double fmt__round_quantum(double a, int qexp, enum fmt__ties ties);

/* fmt__floor_log2 - floor(log2(@a)) for finite @a > 0, exact (subnormal doubles included). */
int fmt__floor_log2(double a);

/* Which codes of a binary format are not finite numbers. */
enum fmt__specials {
  FMT__SPECIALS_IEEE,     /* exponent all ones: Inf (fraction 0) or NaN */
  FMT__SPECIALS_NAN_ONLY, /* only S.1...1.1...1 is NaN, no Inf (OCP E4M3) */
  FMT__SPECIALS_NONE      /* every code is a finite number (OCP E2M1) */
};

/* A sign / exponent / fraction binary floating-point format. */
struct fmt__binary {
  int exp_bits;                /* exponent field width */
  int frac_bits;               /* stored fraction (trailing significand) width */
  int bias;                    /* exponent bias */
  bool subnormals;             /* false: results below the min normal flush to signed zero */
  enum fmt__specials specials; /* Inf / NaN encodings */
  bool saturate;               /* finite overflow -> +-max finite instead of +-Inf */
  uint32_t nan_code;           /* magnitude bits produced for a NaN input (sign copied) */
};

/* Instances, with their sources in binary.c. */
extern const struct fmt__binary fmt__fp16, fmt__bf16, fmt__fp32, fmt__hf32_e8m11, fmt__e4m3,
    fmt__e5m2, fmt__e2m1;

/* fmt__binary_encode - code (sign at bit exp_bits + frac_bits) of @v in format @f. */
uint32_t fmt__binary_encode(const struct fmt__binary *f, double v);

/* fmt__binary_decode - exact value of code @code in format @f. */
double fmt__binary_decode(const struct fmt__binary *f, uint32_t code);

/* fmt__binary_max - largest finite value of @f. */
double fmt__binary_max(const struct fmt__binary *f);

/* fmt__binary_min - smallest positive value of @f (subnormal if it has them). */
double fmt__binary_min(const struct fmt__binary *f);

#endif
