/*
 * test_binary.c - fp16, bf16, fp32, hf32, OCP FP8 E4M3 / E5M2 and FP4 E2M1: every code
 * exhaustively, every halfway point, overflow, underflow, signed zero, NaN, and random doubles
 * against independent references (the compiler's _Float16, (float) casts, nearest-value
 * search, integer rounding of the binary64 pattern).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/formats.h"
#include "ref.h"

TestSuite(binary, .timeout = 30);
TestSuite(hf32, .timeout = 30);

/* Uniform views of the formats with 16 or fewer bits. */
static uint32_t enc_fp16(double v) { return fmt_fp16_from_double(v); }
static double dec_fp16(uint32_t c) { return fmt_fp16_to_double((uint16_t)c); }
static uint32_t enc_bf16(double v) { return fmt_bf16_from_double(v); }
static double dec_bf16(uint32_t c) { return fmt_bf16_to_double((uint16_t)c); }
static uint32_t enc_e4m3(double v) { return fmt_fp8_e4m3_from_double(v); }
static double dec_e4m3(uint32_t c) { return fmt_fp8_e4m3_to_double((uint8_t)c); }
static uint32_t enc_e5m2(double v) { return fmt_fp8_e5m2_from_double(v); }
static double dec_e5m2(uint32_t c) { return fmt_fp8_e5m2_to_double((uint8_t)c); }
static uint32_t enc_e2m1(double v) { return fmt_fp4_e2m1_from_double(v); }
static double dec_e2m1(uint32_t c) { return fmt_fp4_e2m1_to_double((uint8_t)c); }

struct fmt_case {
  const char *name;
  int bits;                 /* code width; the sign is the top bit */
  uint32_t (*enc)(double);
  double (*dec)(uint32_t);
  uint32_t max_code;        /* largest finite positive code; all below it are finite */
  double max;               /* its value */
  uint32_t min_normal_code;
  double min_normal;
  double min_sub;           /* value of code 1 */
  bool saturating;          /* finite overflow -> max (else -> Inf) */
  uint32_t inf_code;        /* what +Inf encodes to */
  int nan_codes;            /* how many codes decode to NaN */
  uint32_t nan_code;        /* what +NaN encodes to */
  uint32_t one_code;        /* code of 1.0 */
};

static const struct fmt_case cases[] = {
    {"fp16", 16, enc_fp16, dec_fp16, 0x7BFF, 65504.0, 0x0400, 0x1p-14, 0x1p-24, false, 0x7C00,
     2 * 1023, 0x7E00, 0x3C00},
    {"bf16", 16, enc_bf16, dec_bf16, 0x7F7F, 0x1.FEp127, 0x0080, 0x1p-126, 0x1p-133, false, 0x7F80,
     2 * 127, 0x7FC0, 0x3F80},
    {"fp8_e4m3", 8, enc_e4m3, dec_e4m3, 0x7E, 448.0, 0x08, 0x1p-6, 0x1p-9, true, 0x7E, 2, 0x7F,
     0x38},
    {"fp8_e5m2", 8, enc_e5m2, dec_e5m2, 0x7B, 57344.0, 0x04, 0x1p-14, 0x1p-16, true, 0x7C, 6, 0x7E,
     0x3C},
    {"fp4_e2m1", 4, enc_e2m1, dec_e2m1, 0x7, 6.0, 0x2, 1.0, 0.5, true, 0x7, 0, 0x0, 0x2},
};
#define NCASES (sizeof cases / sizeof cases[0])

static uint32_t sign_of(const struct fmt_case *f)
{
  return UINT32_C(1) << (f->bits - 1);
}

/* Nearest-value reference: the positive finite values, plus for IEEE overflow the threshold
 * 2^(emax+1) standing for Inf (a tie there goes to Inf's even code, as IEEE says). */
static struct ref_grid grid_of(const struct fmt_case *f)
{
  struct ref_grid g = ref_grid_make(f->dec, f->max_code);
  if (!f->saturating) ref_grid_push(&g, 2 * ldexp(1.0, ilogb(f->max)), f->inf_code);
  return g;
}

/* Reference encoding of @v: nearest value, sign applied, saturation at max. */
static uint32_t ref_encode(const struct fmt_case *f, const struct ref_grid *g, double v)
{
  uint32_t c = g->code[ref_nearest(g, fabs(v), false)];
  return signbit(v) ? c | sign_of(f) : c;
}

Test(binary, every_code_round_trips)
{
  for (size_t k = 0; k < NCASES; k++) {
    const struct fmt_case *f = &cases[k];
    int nans = 0;
    for (uint32_t c = 0; c < UINT32_C(1) << f->bits; c++) {
      double v = f->dec(c);
      if (isnan(v)) {
        nans++;
        cr_assert(isnan(f->dec(f->enc(v))), "%s: NaN code 0x%x does not encode back to NaN",
                  f->name, c);
        continue;
      }
      cr_assert_eq(f->enc(v), c, "%s: code 0x%x decodes to %a which encodes to 0x%x", f->name,
                   c, v, f->enc(v));
    }
    cr_assert_eq(nans, f->nan_codes, "%s: %d NaN codes, expected %d", f->name, nans,
                 f->nan_codes);
  }
}

Test(binary, positive_codes_increase_and_negatives_mirror)
{
  for (size_t k = 0; k < NCASES; k++) {
    const struct fmt_case *f = &cases[k];
    for (uint32_t c = 0; c < f->max_code; c++)
      cr_assert_lt(f->dec(c), f->dec(c + 1), "%s: code 0x%x not below 0x%x", f->name, c, c + 1);
    for (uint32_t c = 0; c <= f->max_code; c++) {
      double neg = f->dec(c | sign_of(f));
      cr_assert(neg == -f->dec(c) && signbit(neg), "%s: code 0x%x is not minus 0x%x", f->name,
                c | sign_of(f), c);
    }
  }
}

Test(binary, spot_values)
{
  for (size_t k = 0; k < NCASES; k++) {
    const struct fmt_case *f = &cases[k];
    cr_assert_eq(f->dec(f->max_code), f->max, "%s max", f->name);
    cr_assert_eq(f->dec(f->min_normal_code), f->min_normal, "%s min normal", f->name);
    cr_assert_eq(f->dec(f->min_normal_code - 1), f->min_normal - f->min_sub,
                 "%s max subnormal", f->name);
    cr_assert_eq(f->dec(1), f->min_sub, "%s min subnormal", f->name);
    cr_assert_eq(f->dec(f->one_code), 1.0, "%s one", f->name);
    cr_assert_eq(f->enc(1.0), f->one_code, "%s one", f->name);
    cr_assert_eq(f->dec(f->enc(-2.0)), -2.0, "%s -2", f->name);
  }
  /* Whole value sets of the small formats. */
  static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 8; c++) {
    cr_assert_eq(fmt_fp4_e2m1_to_double((uint8_t)c), e2m1[c]);
    cr_assert_eq(fmt_fp4_e2m1_to_double((uint8_t)(c | 8)), -e2m1[c]);
  }
  cr_assert_eq(fmt_fp16_to_double(0x7C00), INFINITY);
  cr_assert_eq(fmt_fp16_to_double(0xFC00), -INFINITY);
  cr_assert_eq(fmt_bf16_to_double(0x7F80), INFINITY);
  cr_assert_eq(fmt_fp8_e5m2_to_double(0x7C), INFINITY);
  cr_assert_eq(fmt_fp8_e5m2_to_double(0xFC), -INFINITY);
  cr_assert(isnan(fmt_fp8_e4m3_to_double(0x7F)) && isnan(fmt_fp8_e4m3_to_double(0xFF)));
  cr_assert_eq(fmt_fp8_e4m3_to_double(0x78), 256.0); /* S.1111.000 is a number in E4M3 */
  cr_assert_eq(fmt_fp8_e4m3_to_double(0x7D), 416.0);
  cr_assert_eq(fmt_fp8_e5m2_to_double(0x7A), 49152.0);
  cr_assert_eq(fmt_fp32_to_double(0x7F7FFFFF), FLT_MAX);
  cr_assert_eq(fmt_fp32_to_double(0x00000001), 0x1p-149);
  cr_assert_eq(fmt_fp32_to_double(0x00800000), FLT_MIN);
}

Test(binary, every_halfway_point_rounds_to_even)
{
  for (size_t k = 0; k < NCASES; k++) {
    const struct fmt_case *f = &cases[k];
    struct ref_grid g = grid_of(f);
    for (uint32_t c = 0; c < f->max_code; c++) {
      double lo = f->dec(c), hi = f->dec(c + 1);
      double mid = (lo + hi) / 2; /* exact: both have at most 24 significant bits */
      uint32_t even = c & 1 ? c + 1 : c;
      double below = nextafter(mid, 0), above = nextafter(mid, INFINITY);
      cr_assert_eq(f->enc(mid), even, "%s: %a (between 0x%x and 0x%x) gave 0x%x", f->name, mid,
                   c, c + 1, f->enc(mid));
      cr_assert_eq(f->enc(-mid), even | sign_of(f), "%s: -%a", f->name, mid);
      cr_assert_eq(f->enc(below), c, "%s: just below %a", f->name, mid);
      cr_assert_eq(f->enc(above), c + 1, "%s: just above %a", f->name, mid);
      cr_assert_eq(ref_encode(f, &g, mid), even, "%s: reference disagrees at %a", f->name, mid);
      cr_assert_eq(ref_encode(f, &g, below), c, "%s: reference below %a", f->name, mid);
      cr_assert_eq(ref_encode(f, &g, above), c + 1, "%s: reference above %a", f->name, mid);
    }
    ref_grid_free(&g);
  }
}

#ifdef __FLT16_MAX__
/* The compiler's binary16 (libgcc's correctly rounded double -> _Float16). */
static uint16_t float16_bits(double v)
{
  _Float16 h = (_Float16)v;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

Test(binary, fp16_halfway_points_match_the_compiler)
{
  for (uint32_t c = 0; c < 0x7BFF; c++) {
    double mid = (fmt_fp16_to_double((uint16_t)c) + fmt_fp16_to_double((uint16_t)(c + 1))) / 2;
    double xs[] = {mid, nextafter(mid, 0), nextafter(mid, INFINITY), -mid};
    for (size_t i = 0; i < 4; i++)
      cr_assert_eq(fmt_fp16_from_double(xs[i]), float16_bits(xs[i]), "%a", xs[i]);
  }
}

Test(binary, fp16_matches_the_compiler_on_random_doubles)
{
  uint64_t seed = 0xF16F16;
  for (int i = 0; i < 300000; i++) {
    double v = ref_random(&seed, -30, 17);
    cr_assert_eq(fmt_fp16_from_double(v), float16_bits(v), "%a", v);
  }
}
#endif

Test(binary, random_doubles_match_nearest_value_search)
{
  /* Exponent ranges reach below the smallest subnormal and above the overflow threshold. */
  static const int range[NCASES][2] = {{-30, 17}, {-140, 129}, {-12, 10}, {-19, 17}, {-4, 4}};
  uint64_t seed = 0xC0DE;
  for (size_t k = 0; k < NCASES; k++) {
    const struct fmt_case *f = &cases[k];
    struct ref_grid g = grid_of(f);
    for (int i = 0; i < 100000; i++) {
      double v = ref_random(&seed, range[k][0], range[k][1]);
      cr_assert_eq(f->enc(v), ref_encode(f, &g, v), "%s: %a gave 0x%x, reference 0x%x", f->name,
                   v, f->enc(v), ref_encode(f, &g, v));
    }
    ref_grid_free(&g);
  }
}

Test(binary, bf16_rounds_from_the_double_itself)
{
  /* Through fp32 first, 1 + 2^-8 + 2^-30 would become the tie 1 + 2^-8 and then 1.0. */
  cr_assert_eq(fmt_bf16_from_double(1 + 0x1p-8 + 0x1p-30), 0x3F81);
  cr_assert_eq(fmt_bf16_from_double(1 + 0x1p-8), 0x3F80);
  cr_assert_eq(fmt_bf16_from_double(1 + 0x1p-7 + 0x1p-8), 0x3F82);
  uint64_t seed = 0xBF16;
  for (int i = 0; i < 200000; i++) {
    double v = ref_random(&seed, -126, 126);
    double r = ref_rne_bits(v, 7);
    if (fabs(r) > 0x1.FEp127) continue; /* overflow: covered elsewhere */
    cr_assert_eq(fmt_bf16_to_double(fmt_bf16_from_double(v)), r, "%a", v);
  }
}

Test(binary, overflow_saturates_or_becomes_infinite)
{
  /* IEEE formats: ties at max + half an ulp go to Inf (its code is even). */
  cr_assert_eq(fmt_fp16_from_double(65519.99), 0x7BFF);
  cr_assert_eq(fmt_fp16_from_double(65520.0), 0x7C00);
  cr_assert_eq(fmt_fp16_from_double(-65520.0), 0xFC00);
  cr_assert_eq(fmt_fp16_from_double(1e300), 0x7C00);
  cr_assert_eq(fmt_fp16_from_double(INFINITY), 0x7C00);
  cr_assert_eq(fmt_fp16_from_double(-INFINITY), 0xFC00);
  cr_assert_eq(fmt_bf16_from_double(nextafter(0x1.FFp127, 0)), 0x7F7F);
  cr_assert_eq(fmt_bf16_from_double(0x1.FFp127), 0x7F80);
  cr_assert_eq(fmt_bf16_from_double(-1e300), 0xFF80);
  cr_assert_eq(fmt_fp32_from_double(0x1.FFFFFFp127), 0x7F800000);
  cr_assert_eq(fmt_fp32_from_double(nextafter(0x1.FFFFFFp127, 0)), 0x7F7FFFFF);
  /* E4M3: saturating; Inf has no code and saturates too. */
  cr_assert_eq(fmt_fp8_e4m3_from_double(464.0), 0x7E);
  cr_assert_eq(fmt_fp8_e4m3_from_double(480.0), 0x7E);
  cr_assert_eq(fmt_fp8_e4m3_from_double(1e300), 0x7E);
  cr_assert_eq(fmt_fp8_e4m3_from_double(-1000.0), 0xFE);
  cr_assert_eq(fmt_fp8_e4m3_from_double(INFINITY), 0x7E);
  cr_assert_eq(fmt_fp8_e4m3_from_double(-INFINITY), 0xFE);
  /* E5M2: finite overflow saturates, Inf stays Inf. */
  cr_assert_eq(fmt_fp8_e5m2_from_double(61440.0), 0x7B);
  cr_assert_eq(fmt_fp8_e5m2_from_double(65536.0), 0x7B);
  cr_assert_eq(fmt_fp8_e5m2_from_double(-1e9), 0xFB);
  cr_assert_eq(fmt_fp8_e5m2_from_double(INFINITY), 0x7C);
  cr_assert_eq(fmt_fp8_e5m2_from_double(-INFINITY), 0xFC);
  /* E2M1: saturating, no Inf. */
  cr_assert_eq(fmt_fp4_e2m1_from_double(5.0), 0x6); /* tie between 4 and 6: even */
  cr_assert_eq(fmt_fp4_e2m1_from_double(5.01), 0x7);
  cr_assert_eq(fmt_fp4_e2m1_from_double(7.0), 0x7);
  cr_assert_eq(fmt_fp4_e2m1_from_double(1e300), 0x7);
  cr_assert_eq(fmt_fp4_e2m1_from_double(INFINITY), 0x7);
  cr_assert_eq(fmt_fp4_e2m1_from_double(-INFINITY), 0xF);
}

Test(binary, underflow_and_signed_zero)
{
  cr_assert_eq(fmt_fp16_from_double(0.0), 0x0000);
  cr_assert_eq(fmt_fp16_from_double(-0.0), 0x8000);
  cr_assert(signbit(fmt_fp16_to_double(0x8000)) && fmt_fp16_to_double(0x8000) == 0);
  cr_assert_eq(fmt_fp16_from_double(0x1p-25), 0x0000); /* tie between 0 and 2^-24: even */
  cr_assert_eq(fmt_fp16_from_double(nextafter(0x1p-25, 1)), 0x0001);
  cr_assert_eq(fmt_fp16_from_double(-0x1p-25), 0x8000);
  cr_assert_eq(fmt_fp16_from_double(0x1.8p-24), 0x0002); /* tie between 1 and 2 ulps */
  cr_assert_eq(fmt_fp16_from_double(1e-300), 0x0000);
  cr_assert_eq(fmt_fp16_from_double(-1e-300), 0x8000);
  cr_assert_eq(fmt_fp16_from_double(0x1.FFCp-15), 0x0400); /* max subnormal + half: up */
  cr_assert_eq(fmt_bf16_from_double(0x1p-134), 0x0000);
  cr_assert_eq(fmt_bf16_from_double(-0x1p-134), 0x8000);
  cr_assert_eq(fmt_bf16_from_double(0x1.8p-133), 0x0002);
  cr_assert_eq(fmt_fp32_from_double(0x1p-150), 0x00000000);
  cr_assert_eq(fmt_fp32_from_double(0x1.0000001p-150), 0x00000001);
  cr_assert_eq(fmt_fp8_e4m3_from_double(0x1p-10), 0x00);
  cr_assert_eq(fmt_fp8_e4m3_from_double(-0x1p-10), 0x80);
  cr_assert_eq(fmt_fp8_e4m3_from_double(0x1.8p-9), 0x02);
  cr_assert_eq(fmt_fp8_e4m3_from_double(-0.0), 0x80);
  cr_assert_eq(fmt_fp8_e5m2_from_double(0x1p-17), 0x00);
  cr_assert_eq(fmt_fp8_e5m2_from_double(-0x1p-17), 0x80);
  cr_assert_eq(fmt_fp4_e2m1_from_double(0.25), 0x0);
  cr_assert_eq(fmt_fp4_e2m1_from_double(0.26), 0x1);
  cr_assert_eq(fmt_fp4_e2m1_from_double(-0.25), 0x8);
  cr_assert_eq(fmt_fp4_e2m1_from_double(0.75), 0x2); /* tie between 0.5 and 1: even */
  cr_assert_eq(fmt_fp4_e2m1_from_double(-0.0), 0x8);
}

Test(binary, nan_in_nan_out)
{
  double neg_nan = copysign(NAN, -1.0);
  cr_assert_eq(fmt_fp16_from_double(NAN), 0x7E00);
  cr_assert_eq(fmt_fp16_from_double(neg_nan), 0xFE00);
  cr_assert_eq(fmt_bf16_from_double(NAN), 0x7FC0);
  cr_assert_eq(fmt_bf16_from_double(neg_nan), 0xFFC0);
  cr_assert_eq(fmt_fp32_from_double(NAN), 0x7FC00000);
  cr_assert_eq(fmt_hf32_from_double(NAN), 0x7FC00000);
  cr_assert_eq(fmt_hf32_from_double(neg_nan), 0xFFC00000);
  cr_assert_eq(fmt_fp8_e4m3_from_double(NAN), 0x7F);
  cr_assert_eq(fmt_fp8_e4m3_from_double(neg_nan), 0xFF);
  cr_assert_eq(fmt_fp8_e5m2_from_double(NAN), 0x7E);
  cr_assert_eq(fmt_fp8_e5m2_from_double(neg_nan), 0xFE);
  cr_assert_eq(fmt_fp4_e2m1_from_double(NAN), 0x0); /* no NaN in E2M1: documented +0 */
  cr_assert_eq(fmt_fp4_e2m1_from_double(neg_nan), 0x0);
  cr_assert(isnan(fmt_fp16_to_double(0x7C01)) && isnan(fmt_fp16_to_double(0xFFFF)));
  cr_assert(isnan(fmt_bf16_to_double(0x7F81)));
  cr_assert(isnan(fmt_fp32_to_double(0x7F800001)));
  cr_assert(isnan(fmt_fp8_e5m2_to_double(0x7D)) && isnan(fmt_fp8_e5m2_to_double(0xFF)));
  for (size_t k = 0; k < NCASES; k++)
    cr_assert_eq(cases[k].enc(NAN), cases[k].nan_code, "%s", cases[k].name);
}

static uint32_t float_bits(float x)
{
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

Test(binary, fp32_matches_the_float_cast)
{
  uint64_t seed = 0xF32;
  for (int i = 0; i < 300000; i++) {
    double v = ref_random(&seed, -155, 130);
    float x = (float)v;
    cr_assert_eq(fmt_fp32_from_double(v), float_bits(x), "%a", v);
    cr_assert_eq(fmt_fp32_to_double(float_bits(x)), (double)x, "%a", v);
  }
  cr_assert_eq(fmt_fp32_from_double(-0.0), 0x80000000);
  cr_assert_eq(fmt_fp32_from_double(INFINITY), 0x7F800000);
  cr_assert_eq(fmt_fp32_from_double(-INFINITY), 0xFF800000);
}

/* ---- HF32 ---- */

#define HF32_MAX 0x1.FFEp127 /* (2 - 2^-11) * 2^127 */

Test(hf32, every_code_round_trips)
{
  double prev = -1;
  for (uint32_t s = 0; s < 2; s++)
    for (uint32_t e = 0; e < 256; e++)
      for (uint32_t m = 0; m < 2048; m++) {
        uint32_t h = s << 31 | e << 23 | m << 12;
        double v = fmt_hf32_to_double(h);
        if (e == 255) {
          cr_assert(m ? isnan(v) : isinf(v), "0x%08x", h);
          if (!m) cr_assert_eq(fmt_hf32_from_double(v), h);
          continue;
        }
        if (e == 0) { /* no subnormals: the exponent-0 patterns all read as signed zero */
          cr_assert(v == 0 && !signbit(v) == !s, "0x%08x", h);
          cr_assert_eq(fmt_hf32_from_double(v), s << 31);
          continue;
        }
        cr_assert_eq(fmt_hf32_from_double(v), h, "0x%08x -> %a", h, v);
        if (!s) {
          cr_assert_gt(v, prev, "0x%08x not above the code before it", h);
          prev = v;
        }
      }
  cr_assert_eq(fmt_hf32_to_double(0x7F7FF000), HF32_MAX);
  cr_assert_eq(fmt_hf32_to_double(0x00800000), 0x1p-126);
  cr_assert_eq(fmt_hf32_to_double(0x3F801000), 1 + 0x1p-11);
}

Test(hf32, rounds_to_nearest_even_with_11_fraction_bits)
{
  cr_assert_eq(fmt_hf32_from_double(1 + 0x1p-12), 0x3F800000);          /* tie: even */
  cr_assert_eq(fmt_hf32_from_double(1 + 0x1.8p-11), 0x3F802000);        /* tie: even */
  cr_assert_eq(fmt_hf32_from_double(1 + 0x1p-12 + 0x1p-40), 0x3F801000); /* one rounding */
  cr_assert_eq(fmt_hf32_from_double(nextafter(1 + 0x1p-12, 0)), 0x3F800000);
  cr_assert_eq(fmt_hf32_from_double(-(1 + 0x1.8p-11)), 0xBF802000);
  cr_assert_eq(fmt_hf32_from_double(HF32_MAX), 0x7F7FF000);
  cr_assert_eq(fmt_hf32_from_double(0x1.FFFp127), 0x7F800000); /* max + half ulp: Inf */
  cr_assert_eq(fmt_hf32_from_double(nextafter(0x1.FFFp127, 0)), 0x7F7FF000);
  cr_assert_eq(fmt_hf32_from_double(-1e300), 0xFF800000);
  cr_assert_eq(fmt_hf32_from_double(INFINITY), 0x7F800000);
  cr_assert_eq(fmt_hf32_from_double(0x1p-127), 0x00000000); /* no subnormals */
  cr_assert_eq(fmt_hf32_from_double(-0x1p-127), 0x80000000);
  cr_assert_eq(fmt_hf32_from_double(0x1.FFFp-127), 0x00800000); /* rounds up to 2^-126 */
  cr_assert_eq(fmt_hf32_from_double(-0.0), 0x80000000);

  uint64_t seed = 0x4F32;
  for (int i = 0; i < 300000; i++) {
    double v = ref_random(&seed, -130, 128);
    double r = ref_rne_bits(v, 11);
    uint32_t want;
    if (fabs(r) < 0x1p-126) want = signbit(v) ? 0x80000000 : 0;
    else if (fabs(r) > HF32_MAX) want = signbit(v) ? 0xFF800000 : 0x7F800000;
    else want = float_bits((float)r); /* r has 12 significant bits: exact in float */
    cr_assert_eq(fmt_hf32_from_double(v), want, "%a", v);
  }
}

Test(hf32, reads_other_fp32_patterns_as_the_cube_does)
{
  cr_assert_eq(fmt_hf32_to_double(0x3F8007FF), 1.0);
  cr_assert_eq(fmt_hf32_to_double(0x3F800800), 1.0); /* tie: even */
  cr_assert_eq(fmt_hf32_to_double(0x3F800801), 1 + 0x1p-11);
  cr_assert_eq(fmt_hf32_to_double(0x3F801800), 1 + 0x1p-10);
  cr_assert_eq(fmt_hf32_to_double(0x00000001), 0.0);
  cr_assert(signbit(fmt_hf32_to_double(0x80400000)));
  cr_assert(isnan(fmt_hf32_to_double(0x7F800001)));
}
