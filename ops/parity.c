/* parity.c - numerical parity cases of an operator; see parity.h. */
#include "ops/parity.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "formats/formats.h"

/* The batch parameters, in the order looked for. */
static const char *const batch_names[] = {"rows", "m", "tokens", "batch"};

/* Tiling parameters and the values each case tries (those equal to the base are skipped). */
static const struct {
  const char *name;
  uint64_t values[3];
} tilings[] = {
    {"tile_rows", {1, 8, 32}},   {"tile_cols", {64, 256, 0}}, {"tile_tokens", {1, 16, 0}},
    {"tile_heads", {1, 4, 0}},   {"tile", {256, 2048, 0}},    {"tile_m", {64, 256, 0}},
    {"tile_n", {64, 128, 0}},    {"tile_k", {64, 256, 0}},    {"tile_k0", {32, 64, 0}},
    {"swizzle", {1, 2, 0}},      {"swizzle_dir", {1, 0, 0}},  {"split_k", {1, 2, 4}},
    {"cores", {1, 7, 0}},
};

const char *op_parity_kind_name(enum op_parity_kind k)
{
  static const char *const names[] = {"batch", "tiling", "cores"};
  return names[k];
}

/* Mantissa bits of a floating type (0: an integer type, whose ulp is 1). */
static int mantissa_bits(enum npu_dtype t)
{
  switch (t) {
  case NPU_DT_FP32: return 23;
  case NPU_DT_HF32: case NPU_DT_FP16: return 10;
  case NPU_DT_BF16: return 7;
  case NPU_DT_FP8_E4M3: case NPU_DT_MXFP8: return 3;
  case NPU_DT_FP8_E5M2: return 2;
  case NPU_DT_HIF8: return 3;
  case NPU_DT_FP4_E2M1: case NPU_DT_MXFP4: return 1;
  default: return 0;
  }
}

/* |a - b| in units in the last place of b's binade in type t. */
static double ulps(enum npu_dtype t, double a, double b)
{
  int m = mantissa_bits(t);
  double d = fabs(a - b), ref = fabs(b) > 0 ? fabs(b) : fabs(a);
  if (!m || ref == 0) return d;
  int e;
  frexp(ref, &e); /* ref in [2^(e-1), 2^e) */
  return d / ldexp(1.0, e - 1 - m);
}

/* Element i of n-element data of t, bit for bit equal in x and y. */
static bool same_bits(enum npu_dtype t, const void *x, const void *y, uint64_t i)
{
  int bits = npu_dtype_bits(t);
  if (bits >= 8) {
    size_t es = (size_t)bits / 8;
    return !memcmp((const char *)x + i * es, (const char *)y + i * es, es);
  }
  uint8_t a = ((const uint8_t *)x)[i / 2], b = ((const uint8_t *)y)[i / 2];
  return ((a >> (4 * (i % 2))) & 15) == ((b >> (4 * (i % 2))) & 15);
}

/* Whether the first n elements of two captures of one tensor hold the same bits. */
static bool prefix_equal(enum npu_dtype t, const void *x, const void *y, uint64_t n)
{
  for (uint64_t i = 0; i < n; i++)
    if (!same_bits(t, x, y, i)) return false;
  return true;
}

static const struct op_captured *find(const struct op_capture *c, const char *name)
{
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->t[i].name, name)) return &c->t[i];
  return NULL;
}

/* Whether the base run wrote tensor t (an output, or an input it updates). */
static bool written(const struct op_captured *t)
{
  return t->after && !t->scratch && memcmp(t->before, t->after, fmt_bytes(t->dtype, t->count)) != 0;
}

/* Compare the first n elements of tensor `got` (the case) with `ref` (the base) into c. */
static void compare(struct op_parity_case *c, const struct op_captured *got, const struct op_captured *ref, uint64_t n,
                    uint64_t row_len)
{
  c->tensors++;
  c->compared += n;
  for (uint64_t i = 0; i < n; i++) {
    if (same_bits(ref->dtype, got->after, ref->after, i)) continue;
    double a = fmt_decode(got->dtype, got->after, i), b = fmt_decode(ref->dtype, ref->after, i);
    c->differing++;
    double u = ulps(ref->dtype, a, b), r = fabs(b) > 0 ? fabs(a - b) / fabs(b) : fabs(a - b);
    if (isnan(a) != isnan(b)) u = r = INFINITY;
    if (u > c->max_ulp) c->max_ulp = u;
    if (r > c->max_rel) c->max_rel = r;
    if (!c->first[0]) {
      if (row_len)
        snprintf(c->first, sizeof c->first, "%s[%" PRIu64 ", %" PRIu64 "]: %.9g vs %.9g", ref->name, i / row_len,
                 i % row_len, a, b);
      else
        snprintf(c->first, sizeof c->first, "%s[%" PRIu64 "]: %.9g vs %.9g", ref->name, i, a, b);
    }
  }
}

/* A functional run of d with a on chip, every tensor captured. 0 or the operator's error. */
static int run(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, uint64_t seed,
               struct op_capture *cap, struct op_result *res, struct npu_diag *diag)
{
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true, .seed = seed, .capture = cap};
  return op_run(d, a, chip, &o, res, diag);
}

static struct op_parity_case *add_case(struct op_parity *p, enum op_parity_kind k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static struct op_parity_case *add_case(struct op_parity *p, enum op_parity_kind k, const char *fmt, ...)
{
  p->cases = npu_xrealloc(p->cases, (size_t)(p->n + 1) * sizeof *p->cases);
  struct op_parity_case *c = &p->cases[p->n++];
  memset(c, 0, sizeof *c);
  c->kind = k;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->what, sizeof c->what, fmt, ap);
  va_end(ap);
  return c;
}

/*
 * One case: run it, then compare every tensor the base wrote. batch_ratio > 0 makes it a batch
 * case with the case's batch `small` of the base's `big`: tensors whose size scales with the
 * batch are compared on the shared rows, and inputs that scale must agree there.
 */
static void run_case(struct op_parity *p, struct op_parity_case *c, const struct op_desc *d, const struct op_args *a,
                     const struct arch_chip *chip, uint64_t seed, const struct op_capture *base, uint64_t small,
                     uint64_t big)
{
  struct op_capture cap;
  struct op_result res;
  struct npu_diag why;
  npu_diag_clear(&why);
  memset(&cap, 0, sizeof cap);
  if (run(d, a, chip, seed, &cap, &res, &why)) {
    snprintf(c->why, sizeof c->why, "%.60s%s%.180s", why.key, why.key[0] ? ": " : "", why.msg);
    op_capture_release(&cap);
    return;
  }
  c->ran = true;
  c->comparable = true;
  for (int i = 0; i < base->n && c->comparable; i++) {
    const struct op_captured *ref = &base->t[i], *got = find(&cap, ref->name);
    if (!got || got->dtype != ref->dtype) continue;
    bool scales = big && got->count * big == ref->count * small && got->count != ref->count;
    if (written(ref)) {
      if (big && scales) compare(c, got, ref, got->count, got->count / small);
      else if (!big && got->count == ref->count) compare(c, got, ref, got->count, 0);
      continue;
    }
    /* an input: the rows (or the whole tensor) the comparison relies on must hold the same values */
    uint64_t n = scales ? got->count : got->count == ref->count ? got->count : 0;
    if (n && !prefix_equal(ref->dtype, got->before, ref->before, n)) {
      c->comparable = false;
      snprintf(c->why, sizeof c->why, "input %s differs%s", ref->name,
               scales ? " on the shared rows (its rows are not contiguous, e.g. a transposed operand)" : "");
    }
  }
  if (c->comparable && c->differing) p->differ++;
  if (c->comparable && !c->tensors) {
    c->comparable = false;
    snprintf(c->why, sizeof c->why, "no written tensor %s", big ? "scales with the batch" : "has the base's size");
  }
  op_capture_release(&cap);
}

int op_parity_run(const struct op_desc *d, const struct op_args *a, const struct arch_chip *chip, uint64_t seed,
                  struct op_parity *out, struct npu_diag *diag)
{
  memset(out, 0, sizeof *out);
  op_args_format(d, a, out->base, sizeof out->base);
  struct op_capture base;
  struct op_result res;
  memset(&base, 0, sizeof base);
  int rc = run(d, a, chip, seed, &base, &res, diag);
  if (!rc && res.checked && !res.passed) {
    npu_diag_set(diag, NULL, 0, d->name, "the base run's functional check fails: %s", res.check_summary);
    rc = NPU_EINTERNAL;
  }
  if (rc) {
    op_capture_release(&base);
    return rc;
  }
  for (int i = 0; i < base.n; i++)
    if (written(&base.t[i]))
      snprintf(out->tensors + strlen(out->tensors), sizeof out->tensors - strlen(out->tensors), "%s%s",
               out->tensors[0] ? ", " : "", base.t[i].name);

  /* batch */
  int bi = -1;
  for (size_t k = 0; k < sizeof batch_names / sizeof batch_names[0] && bi < 0; k++) {
    bi = op_param_index(d, batch_names[k]);
    if (bi >= 0 && d->params[bi].type != OP_P_DIM) bi = -1;
  }
  if (bi >= 0) {
    snprintf(out->batch_param, sizeof out->batch_param, "%s", d->params[bi].name);
    /* a transposed operand (trans_* true) keeps its batch rows apart: its shared prefix is not those rows */
    const char *transposed = NULL;
    for (int k = 0; k < d->nparams && !transposed; k++)
      if (d->params[k].type == OP_P_BOOL && !strncmp(d->params[k].name, "trans", 5) && a->u[k])
        transposed = d->params[k].name;
    uint64_t B = a->u[bi], tried[3] = {1, 3, B / 2};
    for (int k = 0; k < 3; k++) {
      uint64_t b = tried[k];
      bool seen = b < 1 || b >= B;
      for (int j = 0; j < k && !seen; j++) seen = tried[j] == b;
      if (seen) continue;
      struct op_args v = *a;
      v.u[bi] = b;
      struct op_parity_case *c = add_case(out, OP_PARITY_BATCH, "%s=%" PRIu64, d->params[bi].name, b);
      if (transposed) {
        snprintf(c->why, sizeof c->why, "%s: a transposed operand's rows are not contiguous, so the runs share no "
                 "rows to compare", transposed);
        continue;
      }
      run_case(out, c, d, &v, chip, seed, &base, b, B);
    }
  }
  /* tiling */
  for (size_t t = 0; t < sizeof tilings / sizeof tilings[0]; t++) {
    int pi = op_param_index(d, tilings[t].name);
    if (pi < 0 || (d->params[pi].type != OP_P_INT && d->params[pi].type != OP_P_DIM)) continue;
    for (int k = 0; k < 3; k++) {
      uint64_t v = tilings[t].values[k];
      if ((!v && k) || v == a->u[pi]) continue;
      struct op_args w = *a;
      w.u[pi] = v;
      struct op_parity_case *c = add_case(out, OP_PARITY_TILING, "%s=%" PRIu64, tilings[t].name, v);
      run_case(out, c, d, &w, chip, seed, &base, 0, 0);
    }
  }
  /* cores */
  struct arch_chip half = *chip;
  half.aic_count = chip->aic_count > 1 ? chip->aic_count / 2 : 1;
  half.aiv_count = chip->aiv_count > 1 ? chip->aiv_count / 2 : 1;
  if (half.aic_count != chip->aic_count || half.aiv_count != chip->aiv_count) {
    struct op_parity_case *c = add_case(out, OP_PARITY_CORES, "cores halved (%d cube, %d vector)", half.aic_count,
                                        half.aiv_count);
    run_case(out, c, d, a, &half, seed, &base, 0, 0);
  }
  op_capture_release(&base);
  return 0;
}

void op_parity_release(struct op_parity *p)
{
  free(p->cases);
  memset(p, 0, sizeof *p);
}
