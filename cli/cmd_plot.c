/*
 * cmd_plot.c - `npusim plot RESULTS.csv --x AXIS [--y METRIC] -o PLOT.png|svg`: a metric
 * against a swept key, one line per combination of the other swept keys, drawn by gnuplot.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/err.h"
#include "common/fdio.h"
#include "common/units.h"
#include "sweep/table.h"

static const char usage[] =
    "usage: npusim plot RESULTS.csv --x AXIS [--y METRIC] -o PLOT.png|PLOT.svg [--title TEXT] [--logx]\n"
    "                   [--include-oom]\n"
    "\n"
    "Draw METRIC (default step_time_s) against the swept key AXIS from a sweep's results, one\n"
    "line per combination of the other swept keys (less those they determine, such as a derived\n"
    "plan.dp, and constants); points with status ok only, and not those out of memory (oom = 1)\n"
    "unless --include-oom: what was left out is said after the plot is written. Axes and legends\n"
    "are in human units (bandwidth_bytes_per_s in GB/s or TB/s, mfu in %). Axis names may\n"
    "leave out the unit suffix (--x chip.hbm.bandwidth for chip.hbm.bandwidth_bytes_per_s).\n"
    "Draws through gnuplot, which must be installed (apt-get install gnuplot-nox); without it\n"
    "the command says so and exits with status 2.\n";

static bool find_gnuplot(char *path, size_t n)
{
  const char *env = getenv("NPUSIM_GNUPLOT");
  if (env && *env) {
    snprintf(path, n, "%s", env);
    return access(path, X_OK) == 0;
  }
  const char *p = getenv("PATH");
  if (!p) p = "/usr/bin:/bin";
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", p);
  for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(path, n, "%s/gnuplot", d);
    if (access(path, X_OK) == 0) return true;
  }
  return false;
}

static void gp_string(struct npu_buf *b, const char *s)
{
  npu_buf_puts(b, "\"");
  for (; *s; s++) npu_buf_printf(b, "%s%c", (*s == '"' || *s == '\\') ? "\\" : "", *s == '_' ? '_' : *s);
  npu_buf_puts(b, "\"");
}

struct pt {
  double x, y;
  int series;
  int row;
};

/* Whether row r is drawn: status ok, and fitting in memory unless --include-oom (oom_col < 0:
 * no such column, or out-of-memory rows are drawn). */
static bool row_ok(const struct sw_table *t, int oom_col, int r)
{
  if (t->status_col >= 0 && strcmp(t->rows[r][t->status_col], "ok")) return false;
  return oom_col < 0 || strcmp(t->rows[r][oom_col], "1");
}

/* Whether column c's value follows from x and the other used columns on the ok rows: no two
 * rows agree on those and differ in c. */
static bool determined(const struct sw_table *t, int oom_col, const bool *use, int xc, int c)
{
  for (int a = 0; a < t->nrows; a++) {
    if (!row_ok(t, oom_col, a)) continue;
    for (int b = a + 1; b < t->nrows; b++) {
      if (!row_ok(t, oom_col, b) || !strcmp(t->rows[a][c], t->rows[b][c])) continue;
      bool same = !strcmp(t->rows[a][xc], t->rows[b][xc]);
      for (int k = 0; same && k < t->ncols; k++)
        if (use[k] && k != c) same = !strcmp(t->rows[a][k], t->rows[b][k]);
      if (same) return false;
    }
  }
  return true;
}

/* A column as people read it: the name without its unit suffix, the unit, and how its values
 * become that unit ("chip.hbm.bandwidth_bytes_per_s" with values to 1.6e12: "chip.hbm.
 * bandwidth", "TB/s", divided by 1e12; "mfu": "mfu", "%", times 100); unit "" when it has none. */
struct axis {
  char name[256];
  const char *unit;
  double mul, div;             /* shown = value x mul / div */
};

static bool ends_with(const char *s, const char *suf)
{
  size_t a = strlen(s), b = strlen(suf);
  return a > b && !strcmp(s + a - b, suf);
}

static struct axis axis_of(const char *col, double maxabs)
{
  struct axis x = {"", "", 1, 1};
  static const struct {
    const char *suffix;
    const char *units[4];
    double steps[4];
  } kinds[] = {
      {"_bytes_per_s", {"TB/s", "GB/s", "MB/s", "B/s"}, {1e12, 1e9, 1e6, 1}},
      {"_flops_per_s", {"PFLOP/s", "TFLOP/s", "GFLOP/s", "FLOP/s"}, {1e15, 1e12, 1e9, 1}},
      {"_bytes", {"TiB", "GiB", "MiB", "B"}, {1099511627776.0, 1073741824.0, 1048576.0, 1}},
      {"_flops", {"PFLOP", "TFLOP", "GFLOP", "FLOP"}, {1e15, 1e12, 1e9, 1}},
      {"_s", {"s", "ms", "us", "ns"}, {1, 1e-3, 1e-6, 1e-9}},
  };
  snprintf(x.name, sizeof x.name, "%s", col);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    if (!ends_with(col, kinds[k].suffix)) continue;
    x.name[strlen(col) - strlen(kinds[k].suffix)] = '\0';
    int i = 0;
    while (i < 3 && maxabs < kinds[k].steps[i]) i++;
    x.unit = kinds[k].units[i];
    x.div = kinds[k].steps[i];
    return x;
  }
  const char *leaf = strrchr(col, '.') ? strrchr(col, '.') + 1 : col;
  if (!strcmp(leaf, "mfu") || !strcmp(leaf, "hfu") || ends_with(col, "_fraction") || !strncmp(leaf, "util", 4) ||
      !strcmp(leaf, "slo_attainment"))
    x.unit = "%", x.mul = 100;
  return x;
}

/* "name (unit)", or the name when the column has no unit. */
static void axis_label(const struct axis *a, char *out, size_t n)
{
  if (a->unit[0]) snprintf(out, n, "%s (%s)", a->name, a->unit);
  else snprintf(out, n, "%s", a->name);
}

/* A legend's "key=value" as people read it: the value of a column with a unit in that unit
 * ("chip.hbm.bandwidth=800 GB/s", not "chip.hbm.bandwidth_bytes_per_s=800000000000"). */
static void legend_part(struct npu_buf *b, const char *col, const char *value)
{
  char *e;
  double v = strtod(value, &e);
  struct axis a = axis_of(col, fabs(v));
  if (e == value || *e || !a.unit[0]) {
    npu_buf_printf(b, "%s%s=%s", b->len ? ", " : "", a.name, value);
    return;
  }
  npu_buf_printf(b, "%s%s=%.4g %s", b->len ? ", " : "", a.name, v * a.mul / a.div, a.unit);
}

static int by_series_x(const void *a, const void *b)
{
  const struct pt *p = a, *q = b;
  if (p->series != q->series) return p->series - q->series;
  if (p->x != q->x) return p->x < q->x ? -1 : 1;
  return p->row - q->row;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *path = NULL, *xs = NULL, *ys = "step_time_s", *dst = NULL, *title = NULL;
  bool logx = false, with_oom = false;
  int rc = 0;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--x") && v) xs = argv[++i];
    else if (!strcmp(a, "--y") && v) ys = argv[++i];
    else if (!strcmp(a, "-o") && v) dst = argv[++i];
    else if (!strcmp(a, "--title") && v) title = argv[++i];
    else if (!strcmp(a, "--logx")) logx = true;
    else if (!strcmp(a, "--include-oom")) with_oom = true;
    else if (a[0] != '-' && !path) path = a;
    else rc = cli_bad_arg(diag, "plot", a);
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "plot needs a results file");
  if (!rc && !xs) rc = npu_diag_set(diag, "command line", 0, "--x", "plot needs --x AXIS (a swept key)");
  const char *ext = dst ? strrchr(dst, '.') : NULL;
  if (!rc && (!ext || (strcmp(ext, ".png") && strcmp(ext, ".svg"))))
    rc = npu_diag_set(diag, "command line", 0, "-o", "plot needs -o FILE.png or FILE.svg");
  struct sw_table t;
  memset(&t, 0, sizeof t);
  if (!rc) rc = sw_table_read(path, &t, diag);
  if (rc) return rc;
  int xc = sw_table_col(&t, xs), yc = sw_table_col(&t, ys), first, end;
  int oom_col = with_oom ? -1 : sw_table_col(&t, "oom");
  int failed = 0, oom = 0;
  for (int r = 0; r < t.nrows; r++) {
    if (t.status_col >= 0 && strcmp(t.rows[r][t.status_col], "ok")) failed++;
    else if (!row_ok(&t, oom_col, r)) oom++;
  }
  sw_table_params(&t, &first, &end);
  if (xc < 0 || yc < 0) {
    const char *bad = xc < 0 ? xs : ys;
    const char *s = npu_suggest(bad, (const char *const *)t.cols, (size_t)t.ncols);
    rc = npu_diag_set(diag, path, 1, xc < 0 ? "--x" : "--y", "no column '%s'%s%s%s", bad, s ? "; did you mean '" : "",
                      s ? s : "", s ? "'?" : "");
    sw_table_free(&t);
    return NPU_EINVAL;
  }
  char gp[1024];
  if (!find_gnuplot(gp, sizeof gp)) {
    sw_table_free(&t);
    return npu_diag_set(diag, "command line", 0, NULL,
                        "gnuplot is not installed: npusim plot draws through it (apt-get install gnuplot-nox), or "
                        "plot %s with any CSV tool", path),
           NPU_EUNSUPPORTED;
  }
  /* series: the values of the other parameter columns, less those the rest determine (a
   * derived key such as plan.dp = devices / (tp x pp), or a constant): they add no line */
  bool *use = npu_xcalloc((size_t)t.ncols, sizeof *use);
  for (int c = first; c < end; c++) use[c] = c != xc;
  for (int c = end - 1; c >= first; c--)
    if (use[c] && determined(&t, oom_col, use, xc, c)) use[c] = false;
  char **series = NULL;
  int nseries = 0, npts = 0;
  struct pt *pts = npu_xcalloc((size_t)t.nrows + 1, sizeof *pts);
  bool numeric_x = true;
  for (int r = 0; r < t.nrows; r++) {
    char *e;
    strtod(t.rows[r][xc], &e);
    if (e == t.rows[r][xc] || *e) numeric_x = false;
  }
  char **cats = NULL;
  int ncats = 0;
  for (int r = 0; r < t.nrows; r++) {
    if (!row_ok(&t, oom_col, r)) continue;
    char *e;
    double y = strtod(t.rows[r][yc], &e);
    if (e == t.rows[r][yc] || *e) continue;
    struct npu_buf key = {0};
    for (int c = first; c < end; c++)
      if (use[c]) legend_part(&key, t.cols[c], t.rows[r][c]);
    int s = 0;
    for (; s < nseries; s++)
      if (!strcmp(series[s], npu_buf_str(&key))) break;
    if (s == nseries) {
      series = npu_xrealloc(series, (size_t)(nseries + 1) * sizeof *series);
      series[nseries++] = npu_xstrdup(npu_buf_str(&key));
    }
    npu_buf_release(&key);
    double x;
    if (numeric_x) {
      x = strtod(t.rows[r][xc], NULL);
    } else {
      int k = 0;
      for (; k < ncats; k++)
        if (!strcmp(cats[k], t.rows[r][xc])) break;
      if (k == ncats) {
        cats = npu_xrealloc(cats, (size_t)(ncats + 1) * sizeof *cats);
        cats[ncats++] = t.rows[r][xc];
      }
      x = k;
    }
    pts[npts++] = (struct pt){x, y, s, r};
  }
  if (!npts)
    rc = (npu_diag_set(diag, path, 0, ys, "no point with status ok%s and a value to plot%s", oom ? " that fits in memory" : "",
                       oom ? " (--include-oom draws those out of memory)" : ""),
          NPU_EINVAL);
  char dir[] = "/tmp/npusim-plot-XXXXXX";
  const char *tmp = getenv("TMPDIR");
  char dirbuf[1024];
  snprintf(dirbuf, sizeof dirbuf, "%s/npusim-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  (void)dir;
  if (!rc && !mkdtemp(dirbuf)) rc = (npu_diag_set(diag, dirbuf, 0, NULL, "cannot create: %s", strerror(errno)), NPU_EIO);
  char data[1200], script[1200], errf[1200];
  snprintf(data, sizeof data, "%s/data.txt", dirbuf);
  snprintf(script, sizeof script, "%s/plot.gp", dirbuf);
  snprintf(errf, sizeof errf, "%s/err.txt", dirbuf);
  if (!rc) {
    qsort(pts, (size_t)npts, sizeof *pts, by_series_x);
    double mx = 0, my = 0;
    for (int i = 0; i < npts; i++) mx = fmax(mx, fabs(pts[i].x)), my = fmax(my, fabs(pts[i].y));
    struct axis ax = numeric_x ? axis_of(t.cols[xc], mx) : (struct axis){"", "", 1, 1}, ay = axis_of(t.cols[yc], my);
    if (!numeric_x) snprintf(ax.name, sizeof ax.name, "%s", t.cols[xc]);
    for (int i = 0; i < npts; i++) {
      if (numeric_x) pts[i].x = pts[i].x * ax.mul / ax.div;
      pts[i].y = pts[i].y * ay.mul / ay.div;
    }
    char xl[300], yl[300];
    axis_label(&ax, xl, sizeof xl);
    axis_label(&ay, yl, sizeof yl);
    struct npu_buf d = {0}, g = {0};
    int cur = -1;
    for (int i = 0; i < npts; i++) {
      if (pts[i].series != cur) {
        if (cur >= 0) npu_buf_puts(&d, "\n\n");
        cur = pts[i].series;
      }
      char xb[64], yb[64];
      npu_fmt_double(pts[i].x, xb, sizeof xb);
      npu_fmt_double(pts[i].y, yb, sizeof yb);
      npu_buf_printf(&d, "%s %s\n", xb, yb);
    }
    npu_buf_printf(&g, "set terminal %s size 900,600\nset output ", !strcmp(ext, ".png") ? "png" : "svg");
    gp_string(&g, dst);
    npu_buf_puts(&g, "\nset datafile separator whitespace\nset grid\nset key below\nset format x \"%g\"\nset xlabel ");
    gp_string(&g, xl);
    npu_buf_puts(&g, " noenhanced\nset ylabel ");
    gp_string(&g, yl);
    npu_buf_puts(&g, " noenhanced\nset title ");
    char tt[1200];
    if (title) snprintf(tt, sizeof tt, "%s", title);
    else snprintf(tt, sizeof tt, "%s against %s", ay.name, ax.name);
    gp_string(&g, tt);
    npu_buf_puts(&g, " noenhanced\n");
    if (logx && numeric_x) npu_buf_puts(&g, "set logscale x\n");
    if (!numeric_x) {
      npu_buf_puts(&g, "set xtics (");
      for (int k = 0; k < ncats; k++) {
        npu_buf_puts(&g, k ? ", " : "");
        gp_string(&g, cats[k]);
        npu_buf_printf(&g, " %d", k);
      }
      npu_buf_printf(&g, ")\nset xrange [-0.5:%d.5]\n", ncats - 1);
    }
    npu_buf_puts(&g, "plot ");
    for (int s = 0; s < nseries; s++) {
      npu_buf_printf(&g, "%s", s ? ", \\\n     " : "");
      gp_string(&g, data);
      npu_buf_printf(&g, " index %d using 1:2 with linespoints ", s);
      if (nseries > 12 || !series[s][0]) npu_buf_puts(&g, "notitle");
      else {
        npu_buf_puts(&g, "title ");
        gp_string(&g, series[s]);
        npu_buf_puts(&g, " noenhanced");
      }
    }
    npu_buf_puts(&g, "\n");
    rc = cli_write_file(data, &d, NULL, diag);
    if (!rc) rc = cli_write_file(script, &g, NULL, diag);
    npu_buf_release(&d);
    npu_buf_release(&g);
  }
  if (!rc) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      FILE *ef = freopen(errf, "w", stderr);
      (void)ef;
      execl(gp, "gnuplot", script, (char *)NULL);
      _exit(127);
    }
    int st = 0;
    if (pid > 0) npu_wait_child(pid, &st);
    struct stat sb;
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || stat(dst, &sb) != 0) {
      char msg[512] = "";
      FILE *f = fopen(errf, "r");
      if (f) {
        size_t k = fread(msg, 1, sizeof msg - 1, f);
        msg[k] = '\0';
        fclose(f);
        for (char *c = msg; *c; c++)
          if (*c == '\n') *c = ' ';
      }
      rc = (npu_diag_set(diag, dst, 0, NULL, "gnuplot failed: %s", msg[0] ? msg : "no output"), NPU_EIO);
    } else {
      npu_buf_printf(out, "wrote %s: %s against %s, %d points in %d series\n", dst, t.cols[yc], t.cols[xc], npts, nseries);
      if (oom) npu_buf_printf(out, "  %d points out of memory (oom = 1) left out (--include-oom draws them)\n", oom);
      if (failed) npu_buf_printf(out, "  %d points that did not run (status not ok) left out\n", failed);
    }
  }
  if (dirbuf[0] && strstr(dirbuf, "XXXXXX") == NULL) {
    unlink(data);
    unlink(script);
    unlink(errf);
    rmdir(dirbuf);
  }
  for (int s = 0; s < nseries; s++) free(series[s]);
  free(series);
  free(use);
  free(cats);
  free(pts);
  sw_table_free(&t);
  return rc;
}

const struct npu_cmd npu_cmd_plot = {
    .name = "plot",
    .summary = "plot a metric of sweep results against a swept key (through gnuplot)",
    .usage = usage,
    .run = run};
