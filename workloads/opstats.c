/* opstats.c - the per-operator statistics of a replay rank's step; see opstats.h. */
#include "workloads/opstats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "common/units.h"
#include "interconnect/coll.h"
#include "workloads/program.h"
#include "workloads/replay.h"

struct table {
  struct wl_op_stat *s;
  int n, cap;
};

static void add(struct table *t, const char *op, int cat, long calls, double each_s)
{
  if (calls <= 0) return;
  struct wl_op_stat *x = NULL;
  for (int i = 0; i < t->n && !x; i++)
    if (t->s[i].cat == cat && !strcmp(t->s[i].op, op)) x = &t->s[i];
  if (!x) {
    if (t->n == t->cap) {
      t->cap = t->cap ? 2 * t->cap : 32;
      t->s = npu_xrealloc(t->s, (size_t)t->cap * sizeof *t->s);
    }
    x = &t->s[t->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->op, sizeof x->op, "%s", op);
    x->cat = cat;
    x->min_s = INFINITY;
  }
  x->calls += calls;
  x->total_s += (double)calls * each_s;
  if (each_s < x->min_s) x->min_s = each_s;
  if (each_s > x->max_s) x->max_s = each_s;
}

/* The name of the choice call c gives its parameter `param`. */
static const char *choice_of(const struct op_call *c, const char *param)
{
  for (int i = 0; i < c->desc->nparams; i++)
    if (!strcmp(c->desc->params[i].name, param)) return c->desc->params[i].choices[op_call_u(c, param)];
  NPU_PANIC("%s has no parameter %s", c->desc->name, param);
}

/* Segment sg, run `times` times: its kernels at their costed times, its TP/CP collectives at
 * theirs (alone on their links, whatever hid them). */
static void add_seg(struct table *t, const struct wl_program *p, const struct wl_seg *sg, long times)
{
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->coll) {
      const struct wl_coll *c = &p->colls[it->index];
      char name[40];
      snprintf(name, sizeof name, "%s %s", c->dim == WL_GROUP_ETP ? "etp" : it->cat == WL_CAT_CP ? "cp" : "tp",
               ic_op_name(c->op));
      add(t, name, it->cat, times, c->time_s);
    } else {
      const struct wl_kernel *k = &p->kernels[it->index];
      char name[40];
      snprintf(name, sizeof name, "%s", k->op);
      if (!strcmp(k->op, "eltwise")) /* eager tensor operations apart: eltwise add, eltwise acc, ... */
        snprintf(name, sizeof name, "eltwise %s", choice_of(&k->call, "fn"));
      add(t, name, it->cat, times, k->time_s);
    }
  }
}

static int heaviest_first(const void *a, const void *b)
{
  const struct wl_op_stat *x = a, *y = b;
  if (x->total_s != y->total_s) return x->total_s < y->total_s ? 1 : -1;
  int c = strcmp(x->op, y->op);
  return c ? c : x->cat - y->cat;
}

int wl_op_stats(const struct wl_program *p, int rank, struct wl_op_stat **out)
{
  NPU_ASSERT(rank >= 0 && rank < p->nranks);
  int s = rank / p->E, e = rank % p->E;
  const struct wl_prog_stage *ps = &p->stages[s];
  struct table t = {0};
  for (size_t pc = 0; pc < ps->nslots;) {
    bool pair = ps->slots[pc].slot.overlap && pc + 1 < ps->nslots;
    const struct wl_step_list *l = &ps->lists[ps->slots[pc].list];
    for (int k = l->first; k < l->first + l->n; k++) {
      const struct wl_step *st = &ps->steps[k];
      if (st->kind == WL_STEP_SEG) {
        add_seg(&t, p, st->u.seg.seg, 1);
      } else if (st->kind == WL_STEP_EXPERTS) {
        int mb = (int)ps->slots[pc + st->half].slot.mb;
        add(&t, "moe_experts", WL_CAT_GEMM, 1, wl_program_expert_s(p, st->u.experts.layer, mb, e,
                                                                   (enum wl_expert_pass)st->u.experts.pass));
      }
    }
    pc += pair ? 2 : 1;
  }
  add_seg(&t, p, &p->optim[s], 1);
  if (t.n > 1) qsort(t.s, (size_t)t.n, sizeof *t.s, heaviest_first);
  *out = t.s;
  return t.n;
}

/* The slowest replay rank's statistics. */
int wl_op_stats_slowest(const struct wl_result *r, struct wl_op_stat **out)
{
  const struct wl_stage_result *sr = &r->stages[r->slowest_stage];
  return wl_op_stats(r->program, sr->stage * r->program->E + sr->ep, out);
}

void wl_op_stats_text(const struct wl_result *r, int top, struct npu_buf *out)
{
  struct wl_op_stat *s;
  int n = wl_op_stats_slowest(r, &s);
  const struct wl_stage_result *sr = &r->stages[r->slowest_stage];
  char who[32] = "";
  if (r->ep > 1) snprintf(who, sizeof who, " (EP rank %d)", sr->ep);
  npu_buf_printf(out, "  operators      stage %d%s, one step, each call costed alone (as msprof's op_statistic):\n",
                 sr->stage, who);
  npu_buf_printf(out, "    %-22s %-10s %9s %10s %10s %7s\n", "operator", "category", "calls", "total ms", "mean us",
                 "% step");
  for (int i = 0; i < n && (top <= 0 || i < top); i++)
    npu_buf_printf(out, "    %-22s %-10s %9ld %10.4g %10.4g %7.1f\n", s[i].op, wl_cat_name((enum wl_cat)s[i].cat),
                   s[i].calls, 1e3 * s[i].total_s, 1e6 * s[i].total_s / (double)s[i].calls,
                   100 * s[i].total_s / r->step_s);
  if (top > 0 && n > top) npu_buf_printf(out, "    ... %d more (all of them: -o DIR, operators.csv)\n", n - top);
  free(s);
}

void wl_op_stats_json(const struct wl_result *r, struct npu_json *j)
{
  struct wl_op_stat *s;
  int n = wl_op_stats_slowest(r, &s);
  npu_json_array_begin(j);
  for (int i = 0; i < n; i++) {
    npu_json_object_begin(j);
    npu_json_key(j, "op");
    npu_json_string(j, s[i].op);
    npu_json_key(j, "category");
    npu_json_string(j, wl_cat_name((enum wl_cat)s[i].cat));
    npu_json_key(j, "calls");
    npu_json_int(j, s[i].calls);
    const char *k[] = {"total_s", "mean_s", "min_s", "max_s", "step_share"};
    double v[] = {s[i].total_s, s[i].total_s / (double)s[i].calls, s[i].min_s, s[i].max_s, s[i].total_s / r->step_s};
    for (int q = 0; q < 5; q++) {
      npu_json_key(j, k[q]);
      npu_json_number(j, v[q]);
    }
    npu_json_object_end(j);
  }
  npu_json_array_end(j);
  free(s);
}

static void real(struct npu_buf *out, double v)
{
  char b[64];
  npu_fmt_double(v, b, sizeof b);
  npu_buf_printf(out, ",%s", b);
}

void wl_op_stats_csv(const struct wl_result *r, struct npu_buf *out)
{
  struct wl_op_stat *s;
  int n = wl_op_stats_slowest(r, &s);
  const struct wl_stage_result *sr = &r->stages[r->slowest_stage];
  npu_buf_printf(out, "stage,ep,op,category,calls,total_s,mean_s,min_s,max_s,step_share\n");
  for (int i = 0; i < n; i++) {
    npu_buf_printf(out, "%d,%d,", sr->stage, sr->ep);
    npu_csv_field(out, s[i].op);
    npu_buf_printf(out, ",%s,%ld", wl_cat_name((enum wl_cat)s[i].cat), s[i].calls);
    real(out, s[i].total_s);
    real(out, s[i].total_s / (double)s[i].calls);
    real(out, s[i].min_s);
    real(out, s[i].max_s);
    real(out, s[i].total_s / r->step_s);
    npu_buf_printf(out, "\n");
  }
  free(s);
}
