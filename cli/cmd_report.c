/*
 * cmd_report.c - `npusim report RESULTS.csv [--best METRIC] [--pareto M1,M2[,...]]`: what a
 * sweep's results say: counts by status, the failures, the best point, the Pareto front.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "report/html.h"
#include "common/err.h"
#include "sweep/table.h"

static const char usage[] =
    "usage: npusim report RESULTS.csv [--best [min:|max:]METRIC] [--pareto M1,M2[,...]] [--top N]\n"
    "                     [--include-oom] [--html FILE]\n"
    "\n"
    "Summarise a sweep's results (npusim sweep, npusim run --csv): points by status and the\n"
    "failures' messages; with --best, the best points by a metric (mfu, hfu and throughputs are\n"
    "maximised, times, bytes and fractions minimised; min:/max: says otherwise); with --pareto,\n"
    "the points no other point beats on every listed metric. Only points with status ok count,\n"
    "and not those out of memory (oom = 1) unless --include-oom. --html FILE also writes one\n"
    "self-contained HTML page: this report, and with --pareto a scatter plot of the points on\n"
    "the first two metrics with the front marked (failed and out-of-memory points left out).\n";


struct crit {
  int col;
  bool max;
  char name[128];
};

static int parse_crit(const struct sw_table *t, const char *spec, struct crit *c, struct npu_diag *diag)
{
  const char *name = spec;
  int dir = 0;
  if (!strncmp(spec, "min:", 4)) dir = -1, name += 4;
  else if (!strncmp(spec, "max:", 4)) dir = 1, name += 4;
  c->col = sw_table_col(t, name);
  if (c->col < 0) {
    const char *s = npu_suggest(name, (const char *const *)t->cols, (size_t)t->ncols);
    return npu_diag_set(diag, t->path, 1, name, "no such column%s%s%s", s ? "; did you mean '" : "", s ? s : "",
                        s ? "'?" : ""),
           NPU_EINVAL;
  }
  snprintf(c->name, sizeof c->name, "%s", t->cols[c->col]);
  c->max = dir ? dir > 0 : cli_metric_maximised(c->name);
  return 0;
}

static bool num(const char *s, double *v)
{
  char *end;
  *v = strtod(s, &end);
  return end != s && !*end && !isnan(*v);
}

/* One row as "point N: k=v, ... -> m=v, ...". */
/* A cell as people read it: a *_bytes column in GiB (or MiB below 1 GiB), else as written. */
static void cell(struct npu_buf *out, const char *col, const char *v)
{
  size_t n = strlen(col);
  double x;
  if (n > 6 && !strcmp(col + n - 6, "_bytes") && num(v, &x) && x >= 1048576) {
    if (x >= 1073741824.0) npu_buf_printf(out, "%.2f GiB", x / 1073741824.0);
    else npu_buf_printf(out, "%.1f MiB", x / 1048576.0);
    return;
  }
  npu_buf_puts(out, v);
}

static void show_row(const struct sw_table *t, int r, const struct crit *c, int nc, struct npu_buf *out)
{
  int first, end;
  sw_table_params(t, &first, &end);
  npu_buf_printf(out, "  point %s:", t->rows[r][0]);
  for (int k = first; k < end; k++) {
    npu_buf_printf(out, "%s %s=", k > first ? "," : "", t->cols[k]);
    cell(out, t->cols[k], t->rows[r][k]);
  }
  npu_buf_puts(out, "  ->");
  for (int i = 0; i < nc; i++) {
    npu_buf_printf(out, "%s %s=", i ? "," : "", c[i].name);
    cell(out, c[i].name, t->rows[r][c[i].col]);
  }
  static const char *const more[] = {"step_time_s", "mfu", "memory_peak_bytes", "bottleneck", NULL};
  for (int m = 0; more[m]; m++) {
    int col = sw_table_col(t, more[m]);
    bool shown = false;
    for (int i = 0; i < nc; i++) shown |= c[i].col == col;
    if (col >= 0 && !shown) {
      npu_buf_printf(out, ", %s=", more[m]);
      cell(out, more[m], t->rows[r][col]);
    }
  }
  npu_buf_puts(out, "\n");
}

static const struct crit *sort_crit;
static const struct sw_table *sort_table;
static int by_crit(const void *a, const void *b)
{
  int ra = *(const int *)a, rb = *(const int *)b;
  double va, vb;
  num(sort_table->rows[ra][sort_crit->col], &va);
  num(sort_table->rows[rb][sort_crit->col], &vb);
  if (va != vb) return (va < vb) == sort_crit->max ? 1 : -1;
  return ra - rb;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *path = NULL, *best = NULL, *pareto = NULL, *html = NULL;
  int top = 1, rc = 0;
  bool with_oom = false;
  /* --html: the Pareto chart's data (set where the front is found) */
  struct rpt_html_scatter chart = {0};
  double *xs = NULL, *ys = NULL;
  bool *marks = NULL;
  const char **labels = NULL;
  char xlabel[160] = "", ylabel[160] = "";
  chart.xlabel = xlabel;
  chart.ylabel = ylabel;
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--best") && v) best = argv[++i];
    else if (!strcmp(a, "--pareto") && v) pareto = argv[++i];
    else if (!strcmp(a, "--html") && v) html = argv[++i];
    else if (!strcmp(a, "--top") && v) {
      top = atoi(argv[++i]);
      if (top < 1) rc = npu_diag_set(diag, "command line", 0, "--top", "expected a positive count");
    } else if (!strcmp(a, "--include-oom")) with_oom = true;
    else if (a[0] != '-' && !path) path = a;
    else rc = cli_bad_arg(diag, "report", a);
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "report needs a results file");
  struct sw_table t;
  memset(&t, 0, sizeof t);
  if (!rc) rc = sw_table_read(path, &t, diag);
  if (rc) return rc;
  if (t.status_col < 0) {
    sw_table_free(&t);
    return npu_diag_set(diag, path, 1, "status", "not a sweep's results: no status column"), NPU_ECONFIG;
  }
  int oom_col = sw_table_col(&t, "oom"), msg_col = sw_table_col(&t, "message");
  int counts[4] = {0}, oom = 0, other = 0;
  int *ok = npu_xcalloc((size_t)t.nrows + 1, sizeof *ok), nok = 0;
  for (int r = 0; r < t.nrows; r++) {
    const char *st = t.rows[r][t.status_col];
    int k = !strcmp(st, "ok") ? 0 : !strcmp(st, "error") ? 1 : !strcmp(st, "crash") ? 2 : !strcmp(st, "timeout") ? 3 : -1;
    if (k < 0) other++;
    else counts[k]++;
    if (k != 0) continue;
    if (oom_col >= 0 && !strcmp(t.rows[r][oom_col], "1") && !with_oom) {
      oom++;
      continue;
    }
    ok[nok++] = r;
  }
  npu_buf_printf(out, "%s: %d points: %d ok", path, t.nrows, counts[0]);
  static const char *const names[] = {"ok", "error", "crash", "timeout"};
  for (int k = 1; k < 4; k++)
    if (counts[k]) npu_buf_printf(out, ", %d %s", counts[k], names[k]);
  if (other) npu_buf_printf(out, ", %d of unknown status", other);
  npu_buf_puts(out, "\n");
  if (oom) npu_buf_printf(out, "  %d ok points do not fit in HBM (oom = 1) and are left out (--include-oom)\n", oom);
  int shown = 0;
  for (int r = 0; r < t.nrows && msg_col >= 0; r++) {
    if (!strcmp(t.rows[r][t.status_col], "ok")) continue;
    if (shown++ < 5) npu_buf_printf(out, "  point %s %s: %s\n", t.rows[r][0], t.rows[r][t.status_col], t.rows[r][msg_col]);
  }
  if (shown > 5) npu_buf_printf(out, "  ... and %d more failed points\n", shown - 5);
  if (best) {
    struct crit c;
    rc = parse_crit(&t, best, &c, diag);
    if (!rc) {
      int n = 0;
      int *idx = npu_xcalloc((size_t)nok + 1, sizeof *idx);
      double v;
      for (int i = 0; i < nok; i++)
        if (num(t.rows[ok[i]][c.col], &v)) idx[n++] = ok[i];
      sort_crit = &c;
      sort_table = &t;
      qsort(idx, (size_t)n, sizeof *idx, by_crit);
      npu_buf_printf(out, "best by %s (%s):\n", c.name, c.max ? "largest" : "smallest");
      if (!n) npu_buf_puts(out, "  no point with a value\n");
      for (int i = 0; i < n && i < top; i++) show_row(&t, idx[i], &c, 1, out);
      free(idx);
    }
  }
  if (!rc && pareto) {
    struct crit c[8];
    int nc = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", pareto);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
      if (nc == 8) rc = npu_diag_set(diag, "command line", 0, "--pareto", "at most 8 metrics");
      else rc = parse_crit(&t, tok, &c[nc++], diag);
    }
    if (!rc && nc < 2) rc = npu_diag_set(diag, "command line", 0, "--pareto", "needs two metrics or more: M1,M2");
    if (!rc) {
      int n = 0;
      int *idx = npu_xcalloc((size_t)nok + 1, sizeof *idx);
      double *val = npu_xcalloc((size_t)(nok + 1) * (size_t)nc, sizeof *val);
      for (int i = 0; i < nok; i++) {
        bool all = true;
        for (int k = 0; k < nc; k++) {
          double v;
          all &= num(t.rows[ok[i]][c[k].col], &v);
          val[n * nc + k] = c[k].max ? -v : v; /* minimise everything */
        }
        if (all) idx[n++] = ok[i];
      }
      int *front = npu_xcalloc((size_t)n + 1, sizeof *front), nf = 0;
      for (int i = 0; i < n; i++) {
        bool dominated = false;
        for (int j = 0; j < n && !dominated; j++) {
          if (j == i) continue;
          bool le = true, lt = false;
          for (int k = 0; k < nc; k++) {
            le &= val[j * nc + k] <= val[i * nc + k];
            lt |= val[j * nc + k] < val[i * nc + k];
          }
          dominated = le && lt;
        }
        if (!dominated) front[nf++] = idx[i];
      }
      sort_crit = &c[0];
      sort_table = &t;
      qsort(front, (size_t)nf, sizeof *front, by_crit);
      npu_buf_printf(out, "Pareto front of %s (%d of %d points):\n", pareto, nf, n);
      for (int i = 0; i < nf; i++) show_row(&t, front[i], c, nc, out);
      if (html) { /* the first two metrics' plane: every point with both values, the front marked */
        chart.n = n;
        chart.x = xs = npu_xcalloc((size_t)n + 1, sizeof *xs);
        chart.y = ys = npu_xcalloc((size_t)n + 1, sizeof *ys);
        chart.mark = marks = npu_xcalloc((size_t)n + 1, sizeof *marks);
        chart.labels = labels = npu_xcalloc((size_t)n + 1, sizeof *labels);
        for (int i = 0; i < n; i++) {
          num(t.rows[idx[i]][c[0].col], &xs[i]);
          num(t.rows[idx[i]][c[1].col], &ys[i]);
          labels[i] = t.rows[idx[i]][0];
          for (int k = 0; k < nf && !marks[i]; k++) marks[i] = front[k] == idx[i];
        }
        snprintf(xlabel, sizeof xlabel, "%s (%s)", c[0].name, c[0].max ? "larger is better" : "smaller is better");
        snprintf(ylabel, sizeof ylabel, "%s (%s)", c[1].name, c[1].max ? "larger is better" : "smaller is better");
      }
      free(front);
      free(val);
      free(idx);
    }
  }
  if (!rc && html) {
    struct npu_buf page = {0};
    char title[1200];
    snprintf(title, sizeof title, "Sweep results: %s", path);
    rpt_html_begin(&page, title);
    if (chart.n > 0) {
      rpt_html_heading(&page, "Pareto front");
      rpt_html_para(&page, "Every point that ran (status ok) and fits in memory, on the first two metrics of "
                           "--pareto; the points of the front in red, joined. Failed and out-of-memory points are "
                           "left out (the text below counts them). Hover a point for its name and values.");
      rpt_html_scatter(&page, &chart);
    }
    rpt_html_heading(&page, "Report");
    rpt_html_pre(&page, npu_buf_str(out));
    rpt_html_end(&page);
    rc = cli_write_file(html, &page, "--html", diag);
    npu_buf_release(&page);
  }
  free(xs);
  free(ys);
  free(marks);
  free(labels);
  free(ok);
  sw_table_free(&t);
  return rc;
}

const struct npu_cmd npu_cmd_report = {
    .name = "report",
    .summary = "summarise sweep results: failures, the best point by a metric, a Pareto front",
    .usage = usage,
    .run = run};
