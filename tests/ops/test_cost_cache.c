/*
 * test_cost_cache.c - the operator cost cache: memo hits, a file that later runs reuse, stale
 * and corrupt files detected and ignored with a warning, keys that change with the chip.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/cost_cache.h"
#include "tests/support/chip.h"
#include "tests/support/support.h"

static struct arch_system sys;
static char *dir;

static void setup(void)
{
  ts_load_system(&sys, "ascend-910b2", NULL);
  dir = ts_tmpdir();
}

static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(cost_cache, .init = setup, .fini = teardown, .timeout = 60);

static struct op_args gemm_args(const char *m)
{
  const struct op_desc *d = op_find("gemm");
  const char *kv[] = {m, "n=256", "k=512", "dtype=bf16"};
  struct op_args a;
  struct npu_diag diag;
  cr_assert_eq(op_args_parse(d, &a, kv, 4, &diag), 0);
  return a;
}

static char warnbuf[4096];

static FILE *warn_stream(void)
{
  memset(warnbuf, 0, sizeof warnbuf);
  return fmemopen(warnbuf, sizeof warnbuf, "w");
}

Test(cost_cache, memo_and_file_reuse)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/costs", dir);
  const struct op_desc *d = op_find("gemm");
  struct op_args a = gemm_args("m=512");
  struct op_cost x, y;
  struct npu_diag diag;
  struct op_cache *c = op_cache_open(path, stderr);
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &x, &diag), 0);
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &y, &diag), 0);
  size_t n;
  uint64_t hits, misses;
  op_cache_stats(c, &n, &hits, &misses);
  cr_assert_eq(n, 1);
  cr_assert_eq(hits, 1);
  cr_assert_eq(misses, 1);
  cr_assert_eq(memcmp(&x, &y, sizeof x), 0);
  cr_assert_eq(op_cache_save(c), 0);
  op_cache_close(c);

  c = op_cache_open(path, stderr);
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &y, &diag), 0);
  op_cache_stats(c, &n, &hits, &misses);
  cr_assert_eq(hits, 1, "a later run reuses the file");
  cr_assert_eq(misses, 0);
  cr_assert_eq(x.time_s, y.time_s, "times survive the file exactly");
  cr_assert_str_eq(x.bottleneck, y.bottleneck);
  op_cache_close(c);
}

static void corrupt_and_reopen(const char *path, const char *edit_from, const char *edit_to, const char *want)
{
  char *text = ts_read(path);
  cr_assert(text != NULL);
  char *p = strstr(text, edit_from);
  cr_assert(p != NULL, "%s not in %s", edit_from, text);
  struct npu_buf b = {0};
  npu_buf_printf(&b, "%.*s%s%s", (int)(p - text), text, edit_to, p + strlen(edit_from));
  FILE *f = fopen(path, "w");
  fputs(npu_buf_str(&b), f);
  fclose(f);
  FILE *w = warn_stream();
  struct op_cache *c = op_cache_open(path, w);
  fclose(w);
  size_t n;
  uint64_t hits, misses;
  op_cache_stats(c, &n, &hits, &misses);
  cr_assert_eq(n, 0, "nothing of a bad file is trusted");
  cr_assert(strstr(warnbuf, want) != NULL, "warning was: %s", warnbuf);
  op_cache_close(c);
  free(text);
  npu_buf_release(&b);
}

static void make_file(const char *path)
{
  const struct op_desc *d = op_find("gemm");
  struct op_cache *c = op_cache_open(path, stderr);
  struct op_cost x;
  struct npu_diag diag;
  for (int i = 0; i < 3; i++) {
    char m[16];
    snprintf(m, sizeof m, "m=%d", 128 * (i + 1));
    struct op_args a = gemm_args(m);
    cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &x, &diag), 0);
  }
  cr_assert_eq(op_cache_save(c), 0);
  op_cache_close(c);
}

Test(cost_cache, corrupt_entry_is_ignored_with_a_warning)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/costs", dir);
  make_file(path);
  corrupt_and_reopen(path, "m=256", "m=257", "corrupt entry; ignoring the file");
}

Test(cost_cache, stale_revision_is_ignored_with_a_warning)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/costs", dir);
  make_file(path);
  corrupt_and_reopen(path, OP_MODEL_REVISION, "npusim-model-0", "costs:1: stale: written by another model revision; ignoring the file");
}

Test(cost_cache, truncated_file_is_ignored_with_a_warning)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/costs", dir);
  make_file(path);
  char *text = ts_read(path);
  size_t len = strlen(text);
  FILE *f = fopen(path, "w");
  fwrite(text, 1, len - 10, f);
  fclose(f);
  free(text);
  FILE *w = warn_stream();
  struct op_cache *c = op_cache_open(path, w);
  fclose(w);
  size_t n;
  uint64_t hits, misses;
  op_cache_stats(c, &n, &hits, &misses);
  cr_assert_eq(n, 0);
  cr_assert(strstr(warnbuf, "truncated") != NULL, "%s", warnbuf);
  op_cache_close(c);
}

Test(cost_cache, another_chip_is_another_key)
{
  const struct op_desc *d = op_find("gemm");
  struct op_args a = gemm_args("m=512");
  struct op_cache *c = op_cache_open(NULL, stderr);
  struct op_cost x, y;
  struct npu_diag diag;
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_ANALYTIC, &x, &diag), 0);
  struct arch_system fast;
  static const char *const sets[] = {"chip.clock=2.2GHz", NULL};
  ts_load_system(&fast, "ascend-910b2", sets);
  cr_assert_eq(op_cost_get(c, d, &a, &fast, CORE_FIDELITY_ANALYTIC, &y, &diag), 0);
  size_t n;
  uint64_t hits, misses;
  op_cache_stats(c, &n, &hits, &misses);
  cr_assert_eq(misses, 2);
  cr_assert(y.time_s < x.time_s);
  op_cache_close(c);
}

Test(cost_cache, event_fidelity_runs_in_a_child_process)
{
  const struct op_desc *d = op_find("gemm");
  struct op_args a = gemm_args("m=512");
  struct op_cache *c = op_cache_open(NULL, stderr);
  struct op_cost x, y;
  struct npu_diag diag;
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_EVENT, &x, &diag), 0, "%s", diag.msg);
  cr_assert_eq(op_cost_get(c, d, &a, &sys, CORE_FIDELITY_EVENT, &y, &diag), 0, "%s", diag.msg);
  cr_assert(x.time_s > 0);
  cr_assert_eq(x.time_s, y.time_s);
  /* and a second, different event kernel in the same process still works */
  struct op_args b = gemm_args("m=256");
  cr_assert_eq(op_cost_get(c, d, &b, &sys, CORE_FIDELITY_EVENT, &y, &diag), 0, "%s", diag.msg);
  cr_assert(y.time_s < x.time_s);
  op_cache_close(c);
}

/* Run the build's fingerprint script over the tree src; returns the fingerprint written. */
static char *fingerprint_of(const char *src)
{
  char out[1100], script[1100], arg_src[1200], arg_out[1200];
  snprintf(out, sizeof out, "%s/fp.h", dir);
  snprintf(script, sizeof script, "%s/cmake/model_fingerprint.cmake", NPUSIM_SOURCE_DIR);
  snprintf(arg_src, sizeof arg_src, "-DSRC=%s", src);
  snprintf(arg_out, sizeof arg_out, "-DOUT=%s", out);
  char *argv[] = {NPUSIM_CMAKE, arg_src, arg_out, "-P", script, NULL};
  struct run_result r = ts_run(argv, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *text = ts_read(out);
  cr_assert(text != NULL);
  char *q = strchr(text, '"');
  cr_assert(q != NULL, "%s", text);
  char *fp = strndup(q + 1, 16);
  free(text);
  return fp;
}

/* The cache's model revision is a hash of the cost model's sources, made by the build: the same
 * sources give the same fingerprint, an edit to any of them another (so no cost computed by an
 * older model is ever reused), and files outside the model's folders do not count. */
Test(cost_cache, model_fingerprint_follows_the_sources)
{
  cr_assert(strstr(OP_MODEL_REVISION, OP_MODEL_FINGERPRINT) != NULL);
  cr_assert_eq(strlen(OP_MODEL_FINGERPRINT), 16);
  char src[1100], sub[1200];
  snprintf(src, sizeof src, "%s/tree", dir);
  mkdir(src, 0777);
  snprintf(sub, sizeof sub, "%s/cores", src);
  mkdir(sub, 0777);
  snprintf(sub, sizeof sub, "%s/workloads", src);
  mkdir(sub, 0777);
  snprintf(sub, sizeof sub, "%s/cores", src);
  free(ts_write(sub, "timing.c", "double cycles = 1;\n"));
  char *a = fingerprint_of(src), *b = fingerprint_of(src);
  cr_assert_str_eq(a, b);
  free(ts_write(sub, "timing.c", "double cycles = 2;\n"));
  char *c = fingerprint_of(src);
  cr_assert_str_neq(a, c);
  snprintf(sub, sizeof sub, "%s/workloads", src);
  free(ts_write(sub, "replay.c", "int x;\n"));
  char *d = fingerprint_of(src);
  cr_assert_str_eq(c, d);
  free(a);
  free(b);
  free(c);
  free(d);
}
