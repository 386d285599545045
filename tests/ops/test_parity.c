/*
 * test_parity.c - numerical parity (ops/parity.h) and the functional outputs behind it: inputs
 * are streams of (seed, tensor name), so a tensor's first rows do not depend on the batch; a
 * row-wise kernel is batch- and core-invariant; the differences parity reports for a split-K
 * change are the ones an independent bit comparison of the two runs counts; a transposed operand
 * makes batch cases not comparable and an unrunnable case carries the operator's reason;
 * `--dump` writes the tensors and `--golden` counts the elements beyond the tolerance.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "ops/parity.h"
#include "tests/ops/opsupport.h"
#include "tests/support/support.h"

TestSuite(parity, .timeout = 240);

static const struct arch_chip *chip910(void)
{
  static struct arch_system sys;
  static bool loaded;
  if (!loaded) ts_load_system(&sys, "ascend-910b2", NULL);
  loaded = true;
  return &sys.chip;
}

static struct op_args args_of(const struct op_desc *d, const char *const *kv)
{
  int n = 0;
  while (kv[n]) n++;
  struct op_args a;
  struct npu_diag diag;
  cr_assert_eq(op_args_parse(d, &a, kv, n, &diag), 0, "%s", diag.msg);
  return a;
}

/* A functional run with every tensor captured. */
static void capture(const char *op, const char *const *kv, struct op_capture *cap)
{
  const struct op_desc *d = op_find(op);
  struct op_args a = args_of(d, kv);
  struct op_run_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true, .seed = 1, .capture = cap};
  struct op_result r;
  struct npu_diag diag;
  cr_assert_eq(op_run(d, &a, chip910(), &o, &r, &diag), 0, "%s", diag.msg);
}

static const struct op_captured *tensor(const struct op_capture *c, const char *name)
{
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->t[i].name, name)) return &c->t[i];
  cr_assert_fail("no tensor %s", name);
  return NULL;
}

static struct op_parity parity(const char *op, const char *const *kv)
{
  const struct op_desc *d = op_find(op);
  struct op_args a = args_of(d, kv);
  struct op_parity p;
  struct npu_diag diag;
  cr_assert_eq(op_parity_run(d, &a, chip910(), 1, &p, &diag), 0, "%s", diag.msg);
  return p;
}

static const struct op_parity_case *find_case(const struct op_parity *p, const char *what)
{
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->cases[i].what, what)) return &p->cases[i];
  cr_assert_fail("no case %s", what);
  return NULL;
}

Test(parity, a_tensors_first_rows_do_not_depend_on_the_batch)
{
  struct op_capture small, big;
  capture("rms_norm", (const char *const[]){"rows=8", "hidden=1024", NULL}, &small);
  capture("rms_norm", (const char *const[]){"rows=64", "hidden=1024", NULL}, &big);
  const char *inputs[] = {"x", "residual", "gamma"};
  for (int i = 0; i < 3; i++) {
    const struct op_captured *s = tensor(&small, inputs[i]), *b = tensor(&big, inputs[i]);
    cr_assert(s->count <= b->count);
    cr_assert(!memcmp(s->before, b->before, fmt_bytes(s->dtype, s->count)), "%s's first rows differ", inputs[i]);
  }
  /* a second tensor's values are not the first's continued: they depend on its name */
  const struct op_captured *x = tensor(&small, "x"), *r = tensor(&small, "residual");
  cr_assert(memcmp(x->before, r->before, fmt_bytes(x->dtype, 1024)) != 0);
  op_capture_release(&small);
  op_capture_release(&big);
}

Test(parity, a_row_wise_norm_is_batch_and_core_invariant)
{
  struct op_parity p = parity("rms_norm", (const char *const[]){"rows=64", "hidden=1024", NULL});
  cr_assert_str_eq(p.batch_param, "rows");
  int batch = 0;
  for (int i = 0; i < p.n; i++) {
    const struct op_parity_case *c = &p.cases[i];
    if (c->kind == OP_PARITY_TILING) continue;
    cr_assert(c->comparable, "%s: %s", c->what, c->why);
    cr_assert_gt(c->compared, 0, "%s", c->what);
    cr_assert_eq(c->differing, 0, "%s changes %llu elements: %s", c->what, (unsigned long long)c->differing, c->first);
    batch += c->kind == OP_PARITY_BATCH;
  }
  cr_assert_eq(batch, 3, "rows 1, 3 and 32 are tried");
  /* rows = 1 compares one row of each of y and h: 2 x 1024 elements */
  cr_assert_eq(find_case(&p, "rows=1")->compared, 2 * 1024);
  op_parity_release(&p);
}

Test(parity, the_differences_reported_for_a_split_k_change_are_the_bits_that_differ)
{
  /* K split 4 ways (given: the tiling search would choose its own split for the default) */
  const char *base[] = {"m=256", "n=16", "k=16384", "dtype=bf16", "split_k=4", NULL};
  struct op_parity p = parity("gemm", base);
  const struct op_parity_case *c = find_case(&p, "split_k=1");
  cr_assert(c->comparable, "%s", c->why);
  /* the same two runs, compared here bit for bit */
  struct op_capture a, b;
  capture("gemm", base, &a);
  capture("gemm", (const char *const[]){"m=256", "n=16", "k=16384", "dtype=bf16", "split_k=1", NULL}, &b);
  const struct op_captured *ca = tensor(&a, "c"), *cb = tensor(&b, "c");
  uint64_t differ = 0;
  for (uint64_t i = 0; i < ca->count; i++) differ += memcmp((char *)ca->after + 2 * i, (char *)cb->after + 2 * i, 2) != 0;
  cr_assert_gt(differ, 0, "splitting K changes the rounding of some sums at this depth (K = 16384)");
  cr_assert_eq(c->differing, differ, "parity reports %llu, the runs differ in %llu", (unsigned long long)c->differing,
               (unsigned long long)differ);
  cr_assert_eq(c->compared, ca->count, "only c is compared (acc is the split-K workspace)");
  cr_assert(c->max_ulp >= 1 && c->first[0]);
  cr_assert_geq(p.differ, 1);
  op_capture_release(&a);
  op_capture_release(&b);
  op_parity_release(&p);
}

Test(parity, a_transposed_operand_makes_batch_cases_not_comparable)
{
  struct op_parity p = parity("gemm", (const char *const[]){"m=64", "n=32", "k=256", "dtype=bf16", "trans_a=true", NULL});
  const struct op_parity_case *c = find_case(&p, "m=1");
  cr_assert(!c->ran && !c->comparable);
  cr_assert(strstr(c->why, "trans_a: a transposed operand's rows are not contiguous"), "%s", c->why);
  cr_assert(find_case(&p, "split_k=1")->comparable, "the tiling cases still compare whole tensors");
  op_parity_release(&p);
}

Test(parity, a_case_the_operator_refuses_is_listed_with_its_reason)
{
  struct op_parity p = parity("rms_norm", (const char *const[]){"rows=64", "hidden=4096", NULL});
  const struct op_parity_case *c = find_case(&p, "tile_rows=32");
  cr_assert(!c->ran && !c->comparable);
  cr_assert(strstr(c->why, "--tile_rows: ") && strstr(c->why, "does not fit"), "%s", c->why);
  op_parity_release(&p);
}

Test(parity, dump_and_golden_compare_a_functional_output)
{
  char *dir = ts_tmpdir(), dump[1024], golden[1100];
  snprintf(dump, sizeof dump, "%s/out", dir);
  struct run_result r = ts_npusim("kernel", "swiglu", "--rows", "16", "--ffn", "256", "--fidelity", "analytic",
                                  "--dump", dump, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char list[1100];
  snprintf(list, sizeof list, "%s/tensors.txt", dump);
  char *text = ts_read(list);
  cr_assert(text && strstr(text, "x bf16 8192\n") && strstr(text, "out bf16 4096\n"), "%s", text ? text : "");
  free(text);
  snprintf(golden, sizeof golden, "out=%s/out.bin", dump);
  r = ts_npusim("kernel", "swiglu", "--rows", "16", "--ffn", "256", "--fidelity", "analytic", "--golden", golden, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "golden            out: 0 of 4096 wrong"), "%s", r.out);
  ts_run_free(&r);
  /* one element moved far beyond the tolerance: one wrong, exit 1 */
  char bin[1100];
  snprintf(bin, sizeof bin, "%s/out.bin", dump);
  FILE *f = fopen(bin, "r+b");
  cr_assert(f);
  uint16_t big = 0x4480; /* bf16 1024 */
  fseek(f, 2 * 100, SEEK_SET);
  fwrite(&big, 2, 1, f);
  fclose(f);
  r = ts_npusim("kernel", "swiglu", "--rows", "16", "--ffn", "256", "--fidelity", "analytic", "--golden", golden, NULL);
  cr_assert_eq(r.status, 1, "%s", r.err);
  cr_assert(strstr(r.err, "out: 1 of 4096 elements differ from the golden file"), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("kernel", "swiglu", "--rows", "16", "--ffn", "256", "--golden", "nosuch=x.bin", NULL);
  cr_assert_eq(r.status, 2);
  ts_run_free(&r);
  ts_rmtree(dir);
  free(dir);
}
