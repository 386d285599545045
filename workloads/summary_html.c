/*
 * summary_html.c - a training step's report as one self-contained HTML page (`npusim run
 * --html FILE`): the key figures, the step breakdown per stage (and EP rank) as stacked bars of
 * the categories of the text report, the memory per stage against the HBM, and the slowest
 * stage's operators. The same figures as the text report and summary.json, in human units.
 */
#include <stdio.h>
#include <stdlib.h>

#include "report/html.h"
#include "workloads/opstats.h"
#include "workloads/summary.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A time in the unit that reads best: us, ms or s. */
static void fmt_time(char *buf, size_t n, double s)
{
  if (s < 1e-3) snprintf(buf, n, "%.3g us", s * 1e6);
  else if (s < 1) snprintf(buf, n, "%.3g ms", s * 1e3);
  else snprintf(buf, n, "%.4g s", s);
}

static void breakdown(const struct wl_result *r, struct npu_buf *out)
{
  const char *series[WL_CAT_COUNT];
  for (int c = 0; c < WL_CAT_COUNT; c++) series[c] = wl_cat_name((enum wl_cat)c);
  char (*labels)[32] = calloc((size_t)r->nstages, sizeof *labels);
  const char **rows = calloc((size_t)r->nstages, sizeof *rows);
  double *v = calloc((size_t)r->nstages * WL_CAT_COUNT, sizeof *v);
  for (int s = 0; s < r->nstages; s++) {
    if (r->ep > 1) snprintf(labels[s], sizeof labels[s], "stage %d.%d", r->stages[s].stage, r->stages[s].ep);
    else snprintf(labels[s], sizeof labels[s], "stage %d", s);
    rows[s] = labels[s];
    for (int c = 0; c < WL_CAT_COUNT; c++) v[s * WL_CAT_COUNT + c] = r->stages[s].cat_s[c];
  }
  struct rpt_html_chart ch = {series, WL_CAT_COUNT, rows, r->nstages, v, r->step_s, "s", 1, 0, NULL};
  rpt_html_bars(out, &ch);
  free(v);
  free(rows);
  free(labels);
}

static void memory(const struct wl_job *job, const struct wl_result *r, struct npu_buf *out)
{
  static const char *const series[] = {"weights", "gradients", "optimizer", "activations", "logits", "buffers"};
  int n = r->nstages; /* every replay rank: a stage (and EP index) */
  char (*labels)[32] = calloc((size_t)n, sizeof *labels);
  const char **rows = calloc((size_t)n, sizeof *rows);
  double *v = calloc((size_t)n * 6, sizeof *v);
  for (int s = 0; s < n; s++) {
    const struct wl_mem *m = &r->stages[s].mem;
    if (r->ep > 1) snprintf(labels[s], sizeof labels[s], "stage %d.%d", r->stages[s].stage, r->stages[s].ep);
    else snprintf(labels[s], sizeof labels[s], "stage %d", s);
    rows[s] = labels[s];
    double x[6] = {m->weights_bytes, m->grads_bytes, m->optimizer_bytes, m->activations_bytes, m->logits_bytes,
                   m->comm_bytes};
    for (int k = 0; k < 6; k++) v[s * 6 + k] = x[k];
  }
  char mark[64];
  double hbm = (double)job->sys.chip.hbm.size_bytes;
  snprintf(mark, sizeof mark, "HBM %.0f GiB", hbm / GIB);
  struct rpt_html_chart ch = {series, 6, rows, n, v, 0, "GiB", 1 / GIB, hbm, mark};
  rpt_html_bars(out, &ch);
  free(v);
  free(rows);
  free(labels);
}

static void operators(const struct wl_result *r, struct npu_buf *out)
{
  struct wl_op_stat *s;
  int n = wl_op_stats_slowest(r, &s);
  static const char *const head[] = {"operator", "category", "calls", "total", "mean", "share of the step"};
  rpt_html_table_begin(out, head, 6);
  for (int i = 0; i < n && i < 15; i++) {
    char calls[32], total[32], mean[32], share[32];
    snprintf(calls, sizeof calls, "%ld", s[i].calls);
    fmt_time(total, sizeof total, s[i].total_s);
    fmt_time(mean, sizeof mean, s[i].total_s / (double)s[i].calls);
    snprintf(share, sizeof share, "%.1f%%", 100 * s[i].total_s / r->step_s);
    const char *cells[] = {s[i].op, wl_cat_name((enum wl_cat)s[i].cat), calls, total, mean, share};
    rpt_html_row(out, cells, 6);
  }
  rpt_html_table_end(out);
  if (n > 15) {
    char more[96];
    snprintf(more, sizeof more, "... and %d more operators (all of them: -o DIR, operators.csv).", n - 15);
    rpt_html_para(out, more);
  }
  free(s);
}

void wl_summary_html(const struct wl_job *job, const struct wl_result *r, struct npu_buf *out)
{
  const struct wl_model *m = &job->model;
  char title[256], plan[512], step[32], tput[96], mfu[64], mem[128], system[160];
  snprintf(title, sizeof title, "%s on %d x %s", m->title[0] ? m->title : m->name, job->devices, job->sys.chip.name);
  snprintf(system, sizeof system, "%s, %d devices of %s",
           job->sys.has_cluster ? job->sys.cluster.name : job->sys.has_node ? job->sys.node.name : "one chip",
           job->devices, job->sys.chip.name);
  wl_plan_text(&job->plan, plan, sizeof plan);
  fmt_time(step, sizeof step, r->step_s);
  snprintf(tput, sizeof tput, "%.0f tokens/s (%.0f per device)", r->tokens_per_s, r->tokens_per_s / job->devices);
  snprintf(mfu, sizeof mfu, "%.1f%% (HFU %.1f%%)", 100 * r->mfu, 100 * r->hfu);
  snprintf(mem, sizeof mem, "%.2f GiB of %.0f GiB on stage %d%s", r->peak_mem.total_bytes / GIB,
           (double)job->sys.chip.hbm.size_bytes / GIB, r->peak_mem.stage, r->oom ? ": OUT OF MEMORY" : "");
  rpt_html_begin(out, title);
  const char *names[] = {"scenario", "system", "plan", "step time", "throughput", "MFU", "memory peak", "bottleneck"};
  const char *values[] = {job->path, system, plan, step, tput, mfu, mem, r->bottleneck};
  rpt_html_facts(out, names, values, 8);
  rpt_html_heading(out, "Step breakdown per stage");
  rpt_html_para(out, "Where each pipeline stage's step goes (seconds; every bar sums to the step time). Hover a "
                     "segment for its value.");
  breakdown(r, out);
  rpt_html_heading(out, "Memory per stage");
  rpt_html_para(out, "What a device of each stage holds at its peak (GiB), against the HBM capacity.");
  memory(job, r, out);
  rpt_html_heading(out, "Operators of the slowest stage (one step, each call costed alone)");
  operators(r, out);
  rpt_html_end(out);
}
