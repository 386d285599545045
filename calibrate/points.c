/*
 * points.c - microbenchmark data files (calibration/data/ (one CSV per kind)) read into points; see
 * calibrate.h. Each file has a header naming its columns; the columns a kind needs must be
 * there, others (note, library, ...) are kept for people. Times come from the measured
 * throughput: a GEMM's 2 m n k FLOPs over its TFLOP/s; a collective's time as measured
 * (time_us), or its bytes over its algbw, or over its busbw divided by the nccl-tests factor of
 * its op and ranks. A collective npusim does not model (sendrecv) is counted as skipped.
 */
#include "calibrate/calibrate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arch/arch.h"
#include "common/err.h"
#include "interconnect/coll.h"
#include "sweep/table.h"

static const struct {
  const char *file;
  const char *const cols[8]; /* required, NULL-terminated */
} files[CAL_KIND_COUNT] = {
    [CAL_GEMM] = {"gemm.csv", {"arch", "m", "n", "k", "dtype", "tflops", "source", NULL}},
    [CAL_COLLECTIVE] = {"collective.csv", {"arch", "op", "size_bytes", "ranks", "nodes", "source", NULL}},
    [CAL_HBM] = {"hbm.csv", {"arch", "kernel", "gbps", "traffic_per_counted_byte", "source", NULL}},
};

static bool want_arch(const char *arch, const char *const *archs)
{
  for (int i = 0; archs[i]; i++)
    if (!strcmp(arch, archs[i])) return true;
  return false;
}

/* A number in a field; fills diag at file:line naming the column when it is not one. */
static int number(const char *text, const char *path, int line, const char *col, double *out, struct npu_diag *diag)
{
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !isfinite(v) || v <= 0)
    return npu_diag_set(diag, path, line, col, "expected a positive number, got '%s'", text), NPU_ECONFIG;
  *out = v;
  return 0;
}

static void push(struct cal_set *set, const struct cal_point *p)
{
  if (set->n == set->cap) {
    set->cap = set->cap ? 2 * set->cap : 32;
    set->p = npu_xrealloc(set->p, (size_t)set->cap * sizeof *set->p);
  }
  set->p[set->n++] = *p;
}

static int row(struct cal_set *set, enum cal_kind kind, const struct sw_table *t, int r, const int *col,
               const char *shown, struct npu_diag *diag)
{
  char *const *f = t->rows[r];
  int line = r + 2, rc = 0;
  struct cal_point p = {.kind = kind};
  snprintf(p.arch, sizeof p.arch, "%s", f[col[0]]);
  snprintf(p.where, sizeof p.where, "%s:%d", shown, line);
  /* a row that leaves a required field empty (a source that does not state the shape or the
   * size) cannot be modelled: counted as skipped */
  for (int c = 1; files[kind].cols[c]; c++)
    if (!f[col[c]][0]) {
      set->skipped++;
      snprintf(set->skip_why, sizeof set->skip_why, "%s: no %s", p.where, files[kind].cols[c]);
      return 0;
    }
  double v[6] = {0};
  if (kind == CAL_HBM) {
    /* the bandwidth as counted by the tool, times the traffic per counted byte (2 for a tool
     * that counts only the input of a read + write kernel): the HBM traffic per second */
    rc = number(f[col[2]], shown, line, "gbps", &v[2], diag);
    if (!rc) rc = number(f[col[3]], shown, line, "traffic_per_counted_byte", &v[3], diag);
    if (rc) return rc;
    snprintf(p.kernel, sizeof p.kernel, "%s", f[col[1]]);
    p.measured = v[2] * v[3];
    p.measured_s = 1.0 / p.measured; /* one GB of traffic */
    snprintf(p.source, sizeof p.source, "%s", f[col[4]]);
  } else if (kind == CAL_GEMM) {
    for (int i = 1; !rc && i <= 3; i++) rc = number(f[col[i]], shown, line, files[kind].cols[i], &v[i], diag);
    if (!rc) rc = number(f[col[5]], shown, line, "tflops", &v[5], diag);
    if (rc) return rc;
    p.m = (long)v[1], p.n = (long)v[2], p.k = (long)v[3];
    snprintf(p.dtype, sizeof p.dtype, "%s", f[col[4]]);
    const char *stat = col[7] >= 0 ? f[col[7]] : "";
    p.maximum = !strncmp(stat, "peak of", 7) || !strncmp(stat, "best of", 7);
    p.measured = v[5];
    p.measured_s = 2.0 * (double)p.m * (double)p.n * (double)p.k / (v[5] * 1e12);
    snprintf(p.source, sizeof p.source, "%s", f[col[6]]);
  } else {
    /* nccl-tests names (all_reduce) or npusim's (allreduce) */
    char name[32];
    size_t o = 0;
    for (const char *c = f[col[1]]; *c && o + 1 < sizeof name; c++)
      if (*c != '_') name[o++] = *c;
    name[o] = '\0';
    enum ic_op op;
    if (ic_op_parse(name, &op)) {
      set->skipped++;
      snprintf(set->skip_why, sizeof set->skip_why, "%s: '%s' is not a collective npusim models", p.where, f[col[1]]);
      return 0;
    }
    for (int i = 2; !rc && i <= 4; i++) rc = number(f[col[i]], shown, line, files[kind].cols[i], &v[i], diag);
    if (rc) return rc;
    snprintf(p.op, sizeof p.op, "%s", name);
    p.bytes = v[2];
    p.ranks = (int)v[3];
    p.nodes = (int)v[4];
    double factor = ic_busbw_factor(op, p.ranks);
    /* the time, as measured or from algbw / busbw */
    if (col[6] >= 0 && f[col[6]][0]) {
      rc = number(f[col[6]], shown, line, "time_us", &v[5], diag);
      p.measured_s = v[5] * 1e-6;
    } else if (col[7] >= 0 && f[col[7]][0]) {
      rc = number(f[col[7]], shown, line, "algbw_gbps", &v[5], diag);
      p.measured_s = p.bytes / (v[5] * 1e9);
    } else if (col[8] >= 0 && f[col[8]][0]) {
      rc = number(f[col[8]], shown, line, "busbw_gbps", &v[5], diag);
      p.measured_s = p.bytes / (v[5] * 1e9 / factor);
    } else {
      rc = npu_diag_set(diag, shown, line, "time_us", "a collective needs time_us, algbw_gbps or busbw_gbps");
    }
    if (rc) return rc;
    p.measured = p.bytes / p.measured_s * factor / 1e9; /* busbw, GB/s */
    snprintf(p.source, sizeof p.source, "%s", f[col[5]]);
  }
  push(set, &p);
  return 0;
}

int cal_points_load(struct cal_set *set, const char *dir, const char *const *archs, struct npu_diag *diag)
{
  memset(set, 0, sizeof *set);
  for (int kind = 0; kind < CAL_KIND_COUNT; kind++) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, files[kind].file);
    struct stat st;
    if (stat(path, &st) != 0) continue; /* no points of this kind */
    /* show paths under the source tree relative to it, as the loader does */
    const char *root = arch_source_root();
    size_t rl = strlen(root);
    const char *shown = !strncmp(path, root, rl) && path[rl] == '/' ? path + rl + 1 : path;
    struct sw_table t;
    int rc = sw_table_read(path, &t, diag);
    if (rc) return rc;
    int col[9];
    int c = 0;
    for (; !rc && files[kind].cols[c]; c++) {
      col[c] = -1;
      for (int i = 0; i < t.ncols; i++)
        if (!strcmp(t.cols[i], files[kind].cols[c])) col[c] = i;
      if (col[c] < 0) {
        npu_diag_set(diag, shown, 1, files[kind].cols[c], "the header has no column '%s'", files[kind].cols[c]);
        rc = NPU_ECONFIG;
      }
    }
    /* optional columns of a collective: the measured figure, in the first one a row gives */
    static const char *const optional[] = {"time_us", "algbw_gbps", "busbw_gbps"};
    for (int o = 0; kind == CAL_COLLECTIVE && o < 3; o++) {
      col[6 + o] = -1;
      for (int i = 0; i < t.ncols; i++)
        if (!strcmp(t.cols[i], optional[o])) col[6 + o] = i;
    }
    /* of a GEMM: how the figure was taken (stat), which tells a search's best from a measurement */
    if (kind == CAL_GEMM) {
      col[7] = -1;
      for (int i = 0; i < t.ncols; i++)
        if (!strcmp(t.cols[i], "stat")) col[7] = i;
    }
    for (int r = 0; !rc && r < t.nrows; r++)
      if (want_arch(t.rows[r][col[0]], archs)) rc = row(set, (enum cal_kind)kind, &t, r, col, shown, diag);
    sw_table_free(&t);
    if (rc) {
      cal_set_release(set);
      return rc;
    }
  }
  return 0;
}

void cal_set_release(struct cal_set *set)
{
  free(set->p);
  memset(set, 0, sizeof *set);
}
