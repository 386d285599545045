/*
 * cmd_plan.c - `npusim plan SCENARIO -o PLANS.csv [-j N] [--metric M] [--top N] [--AXIS LIST]...`:
 * search the parallel plans of a training scenario's model on its system, and rank them.
 *
 * The candidates are the product of the axes (TP, PP, CP, EP, virtual stages, micro-batch,
 * recomputation, ZeRO stage; the global batch and everything else stay the scenario's). Each is
 * checked without simulating it: the plan checks of the loader (what does not divide, what the
 * schedule cannot run) and the memory model (what does not fit in HBM), each pruned candidate
 * counted under its reason. The rest run through the sweep machinery (a process per plan, -j at
 * a time, the scenario's cost cache), into PLANS.csv (a sweep's results: `npusim report` reads
 * it too); the top plans by the metric are printed with their bottleneck and memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/err.h"
#include "sweep/sweep.h"
#include "sweep/table.h"
#include "workloads/job.h"
#include "workloads/memory.h"

static const char usage[] =
    "usage: npusim plan SCENARIO -o PLANS.csv [-j N] [--metric [min:|max:]M] [--top N]\n"
    "                   [--tp LIST] [--pp LIST] [--cp LIST] [--ep LIST] [--vpp LIST]\n"
    "                   [--micro-batch LIST] [--recompute LIST] [--zero LIST] [--offload LIST]\n"
    "                   [--etp LIST]\n"
    "                   [--set KEY=VALUE]...\n"
    "\n"
    "Search the parallel plans of a training scenario: every combination of the axes below\n"
    "(the global batch, model, system and other plan keys stay the scenario's; dp is derived, SP\n"
    "is on wherever tp > 1, vpp > 1 runs the interleaved schedule). Candidates the plan checks\n"
    "refuse (what does not divide) or the memory model puts over HBM are pruned without running,\n"
    "counted by reason; the others run as a sweep (a process each, N at a time) into PLANS.csv,\n"
    "and the best by the metric are printed with their bottleneck and memory.\n"
    "\n"
    "  -o FILE          every evaluated plan, one row each (the columns of a sweep's results)\n"
    "  -j N             plans at a time (default: the number of processors)\n"
    "  --metric M       rank by this column (default tokens_per_s; mfu, step_time_s, ...;\n"
    "                   min:/max: sets the direction, else as in 'npusim report')\n"
    "  --top N          plans printed (default 5)\n"
    "  --tp LIST        comma-separated values (default 1,2,4,8 up to a node's devices)\n"
    "  --pp LIST        (default 1,2,4,8,16)\n"
    "  --cp LIST        (default 1; 1,2,4 for sequences of 16K or more)\n"
    "  --ep LIST        MoE only (default 1,2,4,...,64 up to the experts)\n"
    "  --vpp LIST       (default 1,2,4)\n"
    "  --micro-batch LIST (default 1,2,4)\n"
    "  --recompute LIST none, selective, full (default all three)\n"
    "  --zero LIST      (default the scenario's stage)\n"
    "  --offload LIST   layers per model chunk whose activations go to host memory (plan.offload_layers;\n"
    "                   default the scenario's)\n"
    "  --etp LIST       MoE expert TP sizes, 0 meaning tp (default 0,1: experts split over the TP\n"
    "                   group, or whole with EP folded onto the TP ranks, MoE parallel folding)\n"
    "  --set K=V        override a scenario key for every plan\n"
    "Exit status 2 for a bad scenario or option.\n";

#define AXES 10
enum { A_TP, A_PP, A_CP, A_EP, A_VPP, A_MB, A_RC, A_ZERO, A_OFF, A_ETP };
static const char *const axis_opt[AXES] = {"--tp", "--pp", "--cp", "--ep", "--vpp", "--micro-batch", "--recompute",
                                           "--zero", "--offload", "--etp"};
static const char *const axis_col[AXES] = {"tp", "pp", "cp", "ep", "vpp", "micro_batch", "recompute", "zero",
                                           "offload_layers", "etp"};
static const char *const rc_names[] = {"none", "selective", "full"};
#define MAXV 16

struct axis {
  int v[MAXV];
  int n;
};

static int parse_list(const char *opt, const char *s, int k, struct axis *a, struct npu_diag *diag)
{
  a->n = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s ? s : "");
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (a->n == MAXV) return npu_diag_set(diag, "command line", 0, opt, "at most %d values", MAXV), NPU_EINVAL;
    int v = -1;
    if (k == A_RC) {
      for (int r = 0; r < 3; r++)
        if (!strcmp(tok, rc_names[r])) v = r;
      if (v < 0) return npu_diag_set(diag, "command line", 0, opt, "none, selective or full, got '%s'", tok), NPU_EINVAL;
    } else {
      char *end;
      long x = strtol(tok, &end, 10);
      long lo = k == A_ZERO || k == A_OFF || k == A_ETP ? 0 : 1, hi = k == A_ZERO ? 3 : 1 << 20;
      if (end == tok || *end || x < lo || x > hi)
        return npu_diag_set(diag, "command line", 0, opt, "expected %s, got '%s'",
                            k == A_ZERO  ? "ZeRO stages 0..3"
                            : k == A_OFF ? "layer counts >= 0"
                            : k == A_ETP ? "expert TP sizes >= 0"
                                         : "positive integers",
                            tok),
               NPU_EINVAL;
      v = (int)x;
    }
    a->v[a->n++] = v;
  }
  if (!a->n) return npu_diag_set(diag, "command line", 0, opt, "needs a comma-separated list"), NPU_EINVAL;
  return 0;
}

static void powers(struct axis *a, int from, int to)
{
  a->n = 0;
  for (int v = from; v <= to && a->n < MAXV; v *= 2) a->v[a->n++] = v;
}

/* The axes not given on the command line, from the scenario's model and system. */
static void default_axes(struct axis ax[AXES], const bool given[AXES], const struct wl_job *job)
{
  int node = job->sys.has_node ? job->sys.node.devices : 1;
  if (!given[A_TP]) powers(&ax[A_TP], 1, node < 8 ? node : 8);
  if (!given[A_PP]) powers(&ax[A_PP], 1, 16);
  if (!given[A_CP]) powers(&ax[A_CP], 1, job->model.seq_len >= 16384 ? 4 : 1);
  if (!given[A_EP]) powers(&ax[A_EP], 1, job->model.moe.experts ? (job->model.moe.experts < 64 ? job->model.moe.experts : 64) : 1);
  if (!given[A_VPP]) powers(&ax[A_VPP], 1, 4);
  if (!given[A_MB]) powers(&ax[A_MB], 1, 4);
  if (!given[A_RC]) ax[A_RC] = (struct axis){{0, 1, 2}, 3};
  if (!given[A_ZERO]) ax[A_ZERO] = (struct axis){{job->plan.zero}, 1};
  if (!given[A_OFF]) ax[A_OFF] = (struct axis){{job->plan.offload_layers}, 1};
  if (!given[A_ETP]) /* MoE: experts split over the TP group (0 = tp) and whole (1, EP folded onto TP ranks) */
    ax[A_ETP] = job->model.moe.experts ? (struct axis){{0, 1}, 2} : (struct axis){{0}, 1};
}

/* Pruned candidates, by reason. */
struct reason {
  char key[64];
  char example[256];
  int count;
};

struct search {
  struct reason r[32];
  int nr;
  int candidates, oom;
};

static void prune(struct search *s, const char *key, const char *msg)
{
  for (int i = 0; i < s->nr; i++)
    if (!strcmp(s->r[i].key, key)) {
      s->r[i].count++;
      return;
    }
  if (s->nr == 32) return;
  struct reason *r = &s->r[s->nr++];
  snprintf(r->key, sizeof r->key, "%s", key);
  snprintf(r->example, sizeof r->example, "%s", msg);
  r->count = 1;
}

/* The plan of candidate c (values per axis) from the scenario's, checked; 0 when it is kept.
 * etp0: the expert TP axis lists 0 (tp), so an explicit etp equal to tp is the same plan. */
static int candidate(const struct wl_job *job, const int c[AXES], bool etp0, struct wl_plan *p, struct search *s)
{
  *p = job->plan;
  p->tp = c[A_TP];
  p->pp = c[A_PP];
  p->cp = c[A_CP];
  p->ep = c[A_EP];
  p->vpp = c[A_VPP];
  p->micro_batch = c[A_MB];
  p->recompute = c[A_RC];
  p->zero = c[A_ZERO];
  p->offload_layers = c[A_OFF];
  p->dp = 0;
  p->sp = p->tp > 1;
  p->etp = c[A_ETP];
  p->first_layers = p->last_layers = 0;
  p->layout[0] = 0; /* the scenario's pipeline layout is for its own pp x vpp */
  if (p->recompute != WL_RECOMPUTE_FULL) p->recompute_layers = 0, p->recompute_method = WL_RCM_UNIFORM;
  if (p->vpp > 1) p->schedule = WL_SCHED_INTERLEAVED;
  else if (p->schedule == WL_SCHED_INTERLEAVED) p->schedule = WL_SCHED_1F1B;
  struct npu_diag d;
  npu_diag_clear(&d);
  if (p->recompute == WL_RECOMPUTE_SELECTIVE && job->model.attention == WL_ATTN_FLASH) {
    prune(s, "plan.recompute", "selective recompute is no recompute with FlashAttention: the same plan as none");
    return 1;
  }
  if (etp0 && p->etp == p->tp) {
    prune(s, "plan.etp", "an expert TP of tp is the plan etp 0 names: evaluated once");
    return 1;
  }
  if (p->vpp > 1 && p->pp < 2) {
    prune(s, "plan.vpp", "virtual stages need pp >= 2");
    return 1;
  }
  if (wl_plan_finish(job->cfg, p, &job->model, &job->sys, &d)) {
    prune(s, d.key[0] ? d.key : "plan", d.msg);
    return 1;
  }
  struct wl_mem mem;
  wl_memory_peak(&job->model, p, &mem);
  if (mem.total_bytes > (double)job->sys.chip.hbm.size_bytes) {
    s->oom++;
    return 1;
  }
  return 0;
}

static void add_point(struct sw_spec *spec, const char *path, const struct cli_sets *sets, const struct wl_plan *p)
{
  struct sw_point *pt = &spec->points[spec->npoints];
  char name[256];
  snprintf(name, sizeof name, "tp%d pp%d cp%d ep%d vpp%d mb%d %s zero%d off%d etp%d", p->tp, p->pp, p->cp, p->ep,
           p->vpp, p->micro_batch, rc_names[p->recompute], p->zero, p->offload_layers, p->etp);
  pt->scenario = npu_xstrdup(path);
  pt->display = npu_xstrdup(name);
  pt->sets = npu_xcalloc((size_t)sets->n + 24, sizeof *pt->sets);
  for (int i = 0; i < sets->n; i++) pt->sets[pt->nsets++] = npu_xstrdup(sets->items[i]);
  char kv[96];
#define SET(...) (snprintf(kv, sizeof kv, __VA_ARGS__), pt->sets[pt->nsets++] = npu_xstrdup(kv))
  SET("plan.tp=%d", p->tp);
  SET("plan.sp=%s", p->sp ? "true" : "false");
  SET("plan.pp=%d", p->pp);
  SET("plan.layout=\"\"");
  SET("plan.first_stage_layers=0");
  SET("plan.last_stage_layers=0");
  SET("plan.cp=%d", p->cp);
  SET("plan.dp=0");
  SET("plan.ep=%d", p->ep);
  SET("plan.etp=%d", p->etp);
  SET("plan.vpp=%d", p->vpp);
  SET("plan.schedule=\"%s\"", wl_schedule_name((enum wl_schedule)p->schedule));
  SET("plan.micro_batch=%d", p->micro_batch);
  SET("plan.recompute=\"%s\"", rc_names[p->recompute]);
  SET("plan.zero=%d", p->zero);
  SET("plan.offload_layers=%d", p->offload_layers);
#undef SET
  int vals[AXES] = {p->tp, p->pp, p->cp, p->ep, p->vpp, p->micro_batch, p->recompute, p->zero, p->offload_layers,
                    p->etp};
  pt->cells = npu_xcalloc(AXES + 1, sizeof *pt->cells);
  for (int k = 0; k < AXES; k++) {
    snprintf(kv, sizeof kv, "%d", vals[k]);
    pt->cells[k] = npu_xstrdup(k == A_RC ? rc_names[vals[k]] : kv);
  }
  spec->npoints++;
}


static const struct sw_table *rank_table;
static int rank_col;
static bool rank_max;

static int by_metric(const void *a, const void *b)
{
  double va = atof(rank_table->rows[*(const int *)a][rank_col]), vb = atof(rank_table->rows[*(const int *)b][rank_col]);
  if (va != vb) return (va < vb) == rank_max ? 1 : -1;
  return *(const int *)a - *(const int *)b;
}

/* The best rows of the results by the metric (ok and fitting only). */
static int show_best(const char *csv, const char *metric, int top, struct npu_buf *out, struct npu_diag *diag)
{
  struct sw_table t;
  int rc = sw_table_read(csv, &t, diag);
  if (rc) return rc;
  const char *name = metric;
  int dir = 0;
  if (!strncmp(metric, "min:", 4)) dir = -1, name += 4;
  else if (!strncmp(metric, "max:", 4)) dir = 1, name += 4;
  int col = sw_table_col(&t, name), oom = sw_table_col(&t, "oom"), bn = sw_table_col(&t, "bottleneck");
  int mem = sw_table_col(&t, "memory_peak_bytes"), tok = sw_table_col(&t, "tokens_per_s_per_device"),
      mfu = sw_table_col(&t, "mfu");
  if (col < 0) {
    sw_table_free(&t);
    return npu_diag_set(diag, "command line", 0, "--metric", "no column '%s' in the results", name), NPU_EINVAL;
  }
  int *idx = npu_xcalloc((size_t)t.nrows + 1, sizeof *idx), n = 0, failed = 0;
  for (int r = 0; r < t.nrows; r++) {
    if (strcmp(t.rows[r][t.status_col], "ok")) {
      failed++;
      continue;
    }
    if (oom >= 0 && !strcmp(t.rows[r][oom], "1")) continue;
    idx[n++] = r;
  }
  rank_table = &t;
  rank_col = col;
  rank_max = dir ? dir > 0 : cli_metric_maximised(t.cols[col]);
  qsort(idx, (size_t)n, sizeof *idx, by_metric);
  if (failed) npu_buf_printf(out, "  %d plans failed to run (their rows say why)\n", failed);
  npu_buf_printf(out, "best by %s (%s):\n", t.cols[col], rank_max ? "largest" : "smallest");
  npu_buf_printf(out, "  %4s %-38s %14s %12s %6s %8s  %s\n", "rank", "plan", t.cols[col], "tokens/s/dev", "MFU",
                 "mem GiB", "bottleneck");
  int first, end;
  sw_table_params(&t, &first, &end);
  for (int i = 0; i < n && i < top; i++) {
    char plan[256] = "";
    for (int c = first; c < end; c++) {
      const char *cn = t.cols[c], *v = t.rows[idx[i]][c];
      const char *shown = !strcmp(cn, "micro_batch")      ? "mb"
                          : !strcmp(cn, "recompute")      ? ""
                          : !strcmp(cn, "offload_layers") ? "off"
                                                          : cn;
      snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%s%s%s", c > first ? " " : "", shown, v);
    }
    npu_buf_printf(out, "  %4d %-38s %14.6g %12.1f %5.1f%% %8.2f  %s\n", i + 1, plan, atof(t.rows[idx[i]][col]),
                   tok >= 0 ? atof(t.rows[idx[i]][tok]) : NAN, mfu >= 0 ? 100 * atof(t.rows[idx[i]][mfu]) : NAN,
                   mem >= 0 ? atof(t.rows[idx[i]][mem]) / 1073741824.0 : NAN, bn >= 0 ? t.rows[idx[i]][bn] : "");
  }
  if (!n) npu_buf_puts(out, "  no plan ran and fits\n");
  free(idx);
  sw_table_free(&t);
  return 0;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *path = NULL, *metric = "tokens_per_s", *csv = NULL;
  int top = 5, jobs = cli_default_jobs(), rc = 0;
  struct cli_sets sets = {0};
  struct axis ax[AXES];
  bool given[AXES] = {false};
  for (int i = 1; i < argc && !rc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int t = cli_take_set(argc, argv, &i, &sets, diag);
    if (t < 0) {
      rc = NPU_EINVAL;
      break;
    }
    if (t > 0) continue;
    int k = -1;
    for (int q = 0; q < AXES; q++)
      if (!strcmp(a, axis_opt[q])) k = q;
    if (k >= 0) {
      rc = parse_list(a, v, k, &ax[k], diag);
      given[k] = true;
      i++;
    } else if (!strcmp(a, "-o")) {
      if (!v) rc = npu_diag_set(diag, "command line", 0, "-o", "needs a file name");
      else csv = argv[++i];
    } else if (!strcmp(a, "-j")) {
      rc = cli_parse_int("-j", v, 1, &jobs, diag);
      i++;
    } else if (!strcmp(a, "--top")) {
      rc = cli_parse_int("--top", v, 1, &top, diag);
      i++;
    } else if (!strcmp(a, "--metric")) {
      if (!v) rc = npu_diag_set(diag, "command line", 0, "--metric", "needs a column name");
      else metric = argv[++i];
    } else if (a[0] != '-' && !path) {
      path = a;
    } else {
      rc = cli_bad_arg(diag, "plan", a);
    }
  }
  if (!rc && !path) rc = npu_diag_set(diag, "command line", 0, NULL, "plan needs a training scenario");
  if (!rc && !csv) rc = npu_diag_set(diag, "command line", 0, "-o", "plan needs -o PLANS.csv");
  if (rc) {
    free(sets.items);
    return rc;
  }
  const struct scn_kind *kind = NULL;
  rc = scn_detect(&kind, path, (const char *const *)sets.items, sets.n, diag);
  if (!rc && kind != scn_kind_find("training")) {
    npu_diag_set(diag, path, 0, "model", "plan searches a training scenario (a model section); this is %s %s",
                 kind ? "a" : "no", kind ? kind->name : "scenario");
    rc = NPU_ECONFIG;
  }
  if (rc) {
    free(sets.items);
    return rc;
  }
  struct wl_job job;
  rc = wl_job_load(&job, path, (const char *const *)sets.items, sets.n, diag);
  if (rc) {
    free(sets.items);
    return rc;
  }
  if (!wl_job_is_training(&job)) {
    wl_job_release(&job);
    free(sets.items);
    return npu_diag_set(diag, path, 0, "model", "plan searches a training scenario (a model section)"), NPU_ECONFIG;
  }
  default_axes(ax, given, &job);
  if (!job.model.moe.experts) ax[A_EP] = (struct axis){{1}, 1};

  struct sw_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kind = scn_kind_find("training");
  NPU_ASSERT(spec.kind != NULL);
  spec.ncolumns = AXES;
  spec.columns = npu_xcalloc(AXES + 1, sizeof *spec.columns);
  for (int k = 0; k < AXES; k++) spec.columns[k] = npu_xstrdup(axis_col[k]);
  struct npu_buf mh = {0};
  scn_kind_header(spec.kind, &mh);
  snprintf(spec.metric_header, sizeof spec.metric_header, "%s", npu_buf_str(&mh));
  npu_buf_release(&mh);
  size_t cap = 1;
  for (int k = 0; k < AXES; k++) cap *= (size_t)ax[k].n;
  spec.points = npu_xcalloc(cap + 1, sizeof *spec.points);
  struct search s = {.nr = 0};
  int c[AXES], at[AXES] = {0};
  bool etp0 = false;
  for (int i = 0; i < ax[A_ETP].n; i++) etp0 |= ax[A_ETP].v[i] == 0;
  for (size_t n = 0; n < cap; n++) {
    size_t q = n;
    for (int k = AXES - 1; k >= 0; k--) {
      at[k] = (int)(q % (size_t)ax[k].n);
      q /= (size_t)ax[k].n;
      c[k] = ax[k].v[at[k]];
    }
    s.candidates++;
    struct wl_plan p;
    if (!candidate(&job, c, etp0, &p, &s)) add_point(&spec, job.path, &sets, &p);
  }
  spec.candidates = spec.npoints;
  npu_buf_printf(out, "plan %s: %s on %d x %s, global batch %d: %d candidate plans\n", path,
                 job.model.title[0] ? job.model.title : job.model.name, job.devices, job.sys.chip.name,
                 job.plan.global_batch, s.candidates);
  for (int i = 0; i < s.nr; i++)
    npu_buf_printf(out, "  refused %d by %s (e.g. %s)\n", s.r[i].count, s.r[i].key, s.r[i].example);
  npu_buf_printf(out, "  %d over the %.0f GiB of HBM by the memory model (not run)\n", s.oom,
                 (double)job.sys.chip.hbm.size_bytes / 1073741824.0);
  npu_buf_printf(out, "  %d to run\n", spec.npoints);
  wl_job_release(&job);
  struct sw_exec_options eo = {.csv = csv, .jobs = jobs, .force = true, .journal = false};
  struct sw_result res;
  if (spec.npoints) {
    rc = sw_execute(&spec, &eo, &res, diag);
    if (!rc) npu_buf_printf(out, "ran %d plans in %.3g s, %d at a time; wrote %s\n", res.ran, res.wall_s, jobs, csv);
    if (!rc) rc = show_best(csv, metric, top, out, diag);
  } else {
    npu_buf_puts(out, "no plan to run\n");
  }
  sw_spec_release(&spec);
  free(sets.items);
  return rc;
}

const struct npu_cmd npu_cmd_plan = {
    .name = "plan",
    .summary = "search the parallel plans of a training scenario: prune, run, rank",
    .usage = usage,
    .run = run};
