/*
 * cmd_compare.c - `npusim compare A B [--tolerance PCT]`: two results side by side, column by
 * column: two runs (what changed between two plans, chips or versions), or a measurement next
 * to a simulation (a CSV of measured figures under npusim's column names: step_time_s,
 * tokens_per_s, mfu, ...).
 *
 * A and B are results CSVs (summary.csv, a sweep's or a batch's rows) or directories holding
 * summary.csv; PATH:N takes data row N (1-based; the first by default). Columns are matched by
 * name; numbers are shown with B - A and B / A, texts when they differ, and the columns only
 * one side has are listed. With --tolerance PCT a shared number that differs by more than PCT
 * percent of A's fails the command (exit 1, the message naming each: a regression check).
 *
 * Two collective tables (nccl-tests' output, or `npusim collective`'s, which prints the same
 * columns; report/nccl_table.h) are compared size by size instead: the out-of-place time and
 * bus bandwidth of A and B at every size both have, B / A, and the mean and largest time
 * difference; --tolerance applies to the time at each size. A measured curve against the
 * simulated one is the check a collective's calibration (docs/INTERCONNECT.md) starts from.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/compare.h"
#include "common/err.h"
#include "report/kineto.h"
#include "report/nccl_table.h"
#include "sweep/table.h"

static const char usage[] =
    "usage: npusim compare A B [--tolerance PCT] [--steps N] [--stage S]\n"
    "\n"
    "Show two results column by column: B - A and B / A for every number both have, the texts\n"
    "that differ, and the columns only one has. A and B are results CSVs (a run's summary.csv,\n"
    "a sweep's or a batch's CSV) or directories holding summary.csv; PATH:N takes data row N\n"
    "(1-based, default 1). A measurement compares with a simulation when its CSV names its\n"
    "figures as npusim does (step_time_s, tokens_per_s, mfu, memory_peak_bytes, ...; docs/OUTPUTS.md).\n"
    "Two collective tables (nccl-tests output, or what `npusim collective` prints: a '#' header\n"
    "naming busbw, then rows of size count type redop root time algbw busbw ...; or hccl_test's:\n"
    "data_size aveg_time alg_bandwidth check_result) are compared\n"
    "size by size: the out-of-place time and bus bandwidth, B / A per size, the mean and the\n"
    "largest time difference.\n"
    "A measured operator profile, msprof's op_statistic CSV (OP Type, Count, Total Time(us)),\n"
    "compares with a run's operators.csv (B: the file, or the -o directory): per npusim\n"
    "operator, the CANN types it stands for summed (MatMulV2 and BatchMatMul as gemm, forward\n"
    "and backward together), calls and time per step of each and B / A; types npusim has no\n"
    "operator for are listed with their time. A PyTorch profiler trace (Kineto's JSON) compares\n"
    "the same way by category: its GPU kernels classed by name (nccl: communication; flash,\n"
    "fmha, attention: attention; gemm, cutlass, cublas, nvjet: gemm; adam: optimizer; the rest:\n"
    "vector), memory copies apart, against the run's operators by category.\n"
    "\n"
    "  --tolerance PCT   fail (exit 1, naming them) when shared numbers (collective tables: the\n"
    "                    time at a size; a profile: an operator's time) differ from A's by more\n"
    "                    than PCT percent\n"
    "  --steps N         a profile or trace: the steps A covers (its totals are divided by N;\n"
    "                    default 1)\n"
    "  --stage S         a profile: the pipeline stage of B's operators to compare (default 0)\n";

struct side {
  char path[1100];
  int row;          /* 0-based data row */
  struct sw_table t;
};

/* PATH[:N] -> the CSV file and the row. */
static int open_side(const char *arg, struct side *s, struct npu_diag *diag)
{
  memset(s, 0, sizeof *s);
  char p[1024];
  npu_strlcpy(p, arg, sizeof p);
  char *colon = strrchr(p, ':');
  if (colon && colon[1]) {
    char *end;
    long n = strtol(colon + 1, &end, 10);
    if (!*end) {
      if (n < 1) return npu_diag_set(diag, "command line", 0, NULL, "'%s': rows count from 1", arg), NPU_EINVAL;
      s->row = (int)n - 1;
      *colon = '\0';
    }
  }
  struct stat st;
  if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(s->path, sizeof s->path, "%s/summary.csv", p);
  else npu_strlcpy(s->path, p, sizeof s->path);
  int rc = sw_table_read(s->path, &s->t, diag);
  if (rc) return rc;
  if (s->row >= s->t.nrows)
    return npu_diag_set(diag, s->path, 0, NULL, "has %d data row%s, not %d", s->t.nrows, s->t.nrows == 1 ? "" : "s",
                        s->row + 1),
           NPU_EINVAL;
  return 0;
}

static bool number(const char *s, double *v)
{
  if (!s || !*s) return false;
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return !*end && errno == 0 && isfinite(*v);
}

/* Two collective tables, size by size (see the file comment). */
static int compare_collectives(const char *pa, const char *pb, double tol, struct npu_buf *out,
                               struct npu_diag *diag)
{
  struct nccl_table a, b;
  int rc = nccl_table_read(pa, &a, diag);
  if (rc) return rc;
  rc = nccl_table_read(pb, &b, diag);
  if (rc) return nccl_table_free(&a), rc;
  npu_buf_printf(out, "A  %s (a collective's table, %d sizes)\nB  %s (a collective's table, %d sizes)\n\n", pa, a.n,
                 pb, b.n);
  npu_buf_printf(out, "  %14s %12s %12s %10s %14s %14s\n", "size(B)", "A time(us)", "B time(us)", "B / A",
                 "A busbw(GB/s)", "B busbw(GB/s)");
  int shared = 0;
  struct cli_tally t = {.tol = tol};
  struct npu_buf only_a = {0}, only_b = {0}, texts = {0};
  for (int i = 0; i < a.n; i++) {
    const struct nccl_row *x = &a.rows[i], *y = NULL;
    for (int k = 0; k < b.n && !y; k++)
      if (b.rows[k].size == x->size) y = &b.rows[k];
    if (!y) {
      npu_buf_printf(&only_a, "%s%.0f", only_a.len ? ", " : "", x->size);
      continue;
    }
    shared++;
    if (x->type[0] && y->type[0] && (strcmp(x->type, y->type) || strcmp(x->redop, y->redop)))
      npu_buf_printf(&texts, "  %.0f B: %s %s | %s %s\n", x->size, x->type, x->redop, y->type, y->redop);
    char ratio[32] = "-", label[48], bwa[32] = "-", bwb[32] = "-"; /* hccl_test gives no bus bandwidth */
    if (x->time_us > 0) snprintf(ratio, sizeof ratio, "%.4f", y->time_us / x->time_us);
    snprintf(label, sizeof label, "%.0f B", x->size);
    bool out_of_tol = cli_tally_add(&t, label, x->size, x->time_us, y->time_us, "us");
    if (x->busbw_gbps >= 0) snprintf(bwa, sizeof bwa, "%.2f", x->busbw_gbps);
    if (y->busbw_gbps >= 0) snprintf(bwb, sizeof bwb, "%.2f", y->busbw_gbps);
    npu_buf_printf(out, "  %14.0f %12.2f %12.2f %10s %14s %14s%s\n", x->size, x->time_us, y->time_us, ratio, bwa, bwb,
                   out_of_tol ? "  beyond tolerance" : "");
  }
  for (int k = 0; k < b.n; k++) {
    bool found = false;
    for (int i = 0; i < a.n && !found; i++) found = a.rows[i].size == b.rows[k].size;
    if (!found) npu_buf_printf(&only_b, "%s%.0f", only_b.len ? ", " : "", b.rows[k].size);
  }
  if (texts.len) npu_buf_printf(out, "\ntypes or reductions that differ (A | B)\n%s", npu_buf_str(&texts));
  if (only_a.len) npu_buf_printf(out, "\nsizes only in A, bytes: %s\n", npu_buf_str(&only_a));
  if (only_b.len) npu_buf_printf(out, "\nsizes only in B, bytes: %s\n", npu_buf_str(&only_b));
  if (t.matched)
    npu_buf_printf(out, "\n%d sizes shared: time B / A - 1 mean %+.2f%%, mean |B / A - 1| %.2f%%, largest %.2f%% at %.0f B",
                   shared, 100 * t.sum / shared, 100 * t.sum_abs / shared, 100 * t.worst, t.worst_at);
  else
    npu_buf_printf(out, "\n%d sizes shared", shared);
  if (tol >= 0) npu_buf_printf(out, "; %d beyond %g%%", t.beyond, tol);
  npu_buf_puts(out, "\n");
  if (!shared) {
    npu_buf_release(&t.bad);
    rc = npu_diag_set(diag, "command line", 0, NULL, "%s and %s have no message size in common", pa, pb);
  } else {
    rc = cli_tally_finish(&t, "size", "sizes", diag);
  }
  npu_buf_release(&only_a);
  npu_buf_release(&only_b);
  npu_buf_release(&texts);
  nccl_table_free(&a);
  nccl_table_free(&b);
  return rc;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *args[2] = {NULL, NULL};
  int nargs = 0, rc = 0, nsteps = 1, stage = 0;
  const char *profile_opt = NULL; /* --steps or --stage: for a measured profile only */
  double tol = -1;
  for (int i = 1; i < argc && !rc; i++) {
    if (!strcmp(argv[i], "--tolerance")) {
      char *end;
      double v = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
      if (i + 1 >= argc || end == argv[i + 1] || *end || !(v >= 0) || !isfinite(v))
        rc = npu_diag_set(diag, "command line", 0, "--tolerance", "expected a percentage >= 0, got '%s'",
                          i + 1 < argc ? argv[i + 1] : "");
      tol = v;
      i++;
    } else if (!strcmp(argv[i], "--steps") || !strcmp(argv[i], "--stage")) {
      char *end;
      long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
      bool steps = argv[i][4] == 'e';
      if (i + 1 >= argc || end == argv[i + 1] || *end || v < (steps ? 1 : 0) || v > 1000000)
        rc = npu_diag_set(diag, "command line", 0, argv[i], "expected a whole number %s, got '%s'",
                          steps ? ">= 1" : ">= 0", i + 1 < argc ? argv[i + 1] : "");
      else if (steps) nsteps = (int)v;
      else stage = (int)v;
      profile_opt = argv[i];
      i++;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      rc = cli_bad_arg(diag, "compare", argv[i]);
    } else if (nargs < 2) {
      args[nargs++] = argv[i];
    } else {
      rc = npu_diag_set(diag, "command line", 0, NULL, "compare takes two results, got a third: '%s'", argv[i]);
    }
  }
  if (!rc && nargs < 2) rc = npu_diag_set(diag, "command line", 0, NULL, "compare needs two results: A B");
  if (!rc && cli_is_op_statistic(args[0]))
    return cli_compare_op_statistic(args[0], args[1], nsteps, stage, tol, out, diag);
  if (!rc && kineto_sniff(args[0])) return cli_compare_kineto(args[0], args[1], nsteps, stage, tol, out, diag);
  if (!rc && kineto_sniff(args[1]))
    return npu_diag_set(diag, args[1], 0, NULL, "is a PyTorch profiler trace: the measured profile goes first (A), "
                                                "the run's operators.csv second (B)");
  if (!rc && cli_is_op_statistic(args[1]))
    return npu_diag_set(diag, args[1], 0, NULL, "is msprof's op_statistic: the measured profile goes first (A), "
                                                "the run's operators.csv second (B)");
  if (!rc && profile_opt)
    return npu_diag_set(diag, "command line", 0, profile_opt,
                        "applies to a measured profile (msprof's op_statistic or a PyTorch profiler trace as A), "
                        "and %s is none",
                        args[0]);
  if (!rc) {
    bool ca = nccl_table_sniff(args[0]), cb = nccl_table_sniff(args[1]);
    if (ca && cb) return compare_collectives(args[0], args[1], tol, out, diag);
    if (ca != cb)
      return npu_diag_set(diag, ca ? args[1] : args[0], 0, NULL,
                          "is not a collective's table, while %s is (nccl-tests columns): compare two of a kind",
                          ca ? args[0] : args[1]);
  }
  struct side a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (!rc) rc = open_side(args[0], &a, diag);
  if (!rc) rc = open_side(args[1], &b, diag);
  if (rc) {
    sw_table_free(&a.t);
    sw_table_free(&b.t);
    return rc;
  }
  char **ra = a.t.rows[a.row], **rb = b.t.rows[b.row];
  npu_buf_printf(out, "A  %s (row %d)\nB  %s (row %d)\n\n", a.path, a.row + 1, b.path, b.row + 1);
  npu_buf_printf(out, "  %-34s %16s %16s %14s %10s\n", "column", "A", "B", "B - A", "B / A");
  int shared = 0, rated = 0, beyond = 0;
  double worst = 0, sum_rel = 0;
  const char *worst_col = NULL;
  struct npu_buf texts = {0}, only_a = {0}, only_b = {0}, bad = {0};
  for (int i = 0; i < a.t.ncols; i++) {
    int j = -1;
    for (int k = 0; k < b.t.ncols && j < 0; k++)
      if (!strcmp(a.t.cols[i], b.t.cols[k])) j = k;
    if (j < 0) {
      npu_buf_printf(&only_a, "%s%s", only_a.len ? ", " : "", a.t.cols[i]);
      continue;
    }
    double x, y;
    if (number(ra[i], &x) && number(rb[j], &y)) {
      char ratio[32] = "-";
      double rel = x != 0 ? fabs(y - x) / fabs(x) : (y != 0 ? INFINITY : 0);
      if (x != 0) snprintf(ratio, sizeof ratio, "%.4f", y / x);
      npu_buf_printf(out, "  %-34s %16.6g %16.6g %14.6g %10s%s\n", a.t.cols[i], x, y, y - x, ratio,
                     tol >= 0 && rel * 100 > tol ? "  beyond tolerance" : "");
      shared++;
      if (isfinite(rel)) { /* A = 0 and B not: no ratio, left out of the mean */
        sum_rel += rel;
        rated++;
        if (rel > worst || !worst_col) {
          worst = rel;
          worst_col = a.t.cols[i];
        }
      }
      if (tol >= 0 && rel * 100 > tol && beyond++ < 6)
        npu_buf_printf(&bad, "%s%s %.6g -> %.6g (%+.2f%%)", bad.len ? "; " : "", a.t.cols[i], x, y,
                       x != 0 ? 100 * (y - x) / fabs(x) : INFINITY);
    } else if (strcmp(ra[i], rb[j])) {
      npu_buf_printf(&texts, "  %-34s %s | %s\n", a.t.cols[i], ra[i], rb[j]);
    }
  }
  for (int k = 0; k < b.t.ncols; k++) {
    bool found = false;
    for (int i = 0; i < a.t.ncols && !found; i++) found = !strcmp(a.t.cols[i], b.t.cols[k]);
    if (!found) npu_buf_printf(&only_b, "%s%s", only_b.len ? ", " : "", b.t.cols[k]);
  }
  if (texts.len) npu_buf_printf(out, "\ntexts that differ (A | B)\n%s", npu_buf_str(&texts));
  if (only_a.len) npu_buf_printf(out, "\nonly in A: %s\n", npu_buf_str(&only_a));
  if (only_b.len) npu_buf_printf(out, "\nonly in B: %s\n", npu_buf_str(&only_b));
  if (rated) {
    npu_buf_printf(out, "\n%d numbers shared", shared);
    if (rated < shared) npu_buf_printf(out, " (%d left out: A is 0, B is not)", shared - rated);
    npu_buf_printf(out, ": mean |B / A - 1| %.2f%%, largest %s %.2f%%", 100 * sum_rel / rated, worst_col, 100 * worst);
    if (tol >= 0) npu_buf_printf(out, "; %d beyond %g%%", beyond, tol);
    npu_buf_puts(out, "\n");
  } else {
    npu_buf_printf(out, "\n%d numbers shared, none with a ratio (A is 0)\n", shared);
  }
  npu_buf_release(&texts);
  npu_buf_release(&only_a);
  npu_buf_release(&only_b);
  sw_table_free(&a.t);
  sw_table_free(&b.t);
  if (beyond) /* a failed check: its message says what (the table is printed when it passes) */
    rc = (npu_diag_set(diag, NULL, 0, "--tolerance", "%d number%s beyond %g%%: %s%s", beyond, beyond == 1 ? "" : "s", tol,
                       npu_buf_str(&bad), beyond > 6 ? "; ..." : ""),
          NPU_EINTERNAL);
  npu_buf_release(&bad);
  return rc;
}

const struct npu_cmd npu_cmd_compare = {
    .name = "compare",
    .summary = "two results side by side: runs, or a measurement and a simulation",
    .usage = usage,
    .run = run};
