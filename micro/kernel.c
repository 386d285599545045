/*
 * kernel.c - kernel scenarios: the kernel section, its operator-argument keys generated from
 * the operator registry, loading with located errors, running, and the reports shared with
 * `npusim kernel`. See micro.h.
 */
#include "micro/micro.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "report/columns.h"
#include "report/html.h"
#include "common/units.h"
#include "micro/micro_int.h"
#include "ops/plugin.h"

/* ------------------------------------------------------------------ the kernel section */

#define NPU_PARAM_STRUCT struct mc_kernel_spec

static const char *const fid_names[] = {"event", "analytic", NULL};

static const struct npu_section sections[] = {
    {"kernel", false, "one operator kernel on the chip"},
};

static const struct npu_param params[] = {
    {"kernel.op", NPU_PT_STRING, NPU_PARAM_OFF(op), NPU_PARAM_SZ(op), NULL, 0, 0, 0, NULL,
     "the operator (npusim kernel list)"},
    {"kernel.args", NPU_PT_STRING, NPU_PARAM_OFF(args), NPU_PARAM_SZ(args), "", 0, 0, 0, NULL,
     "operator arguments, \"name=value ...\" as npusim kernel's --name value (kernel.<name> keys override them)"},
    {"kernel.fidelity", NPU_PT_ENUM, NPU_PARAM_OFF(fidelity), 0, "analytic", 0, 0, 0, fid_names,
     "analytic (closed-form tile pipeline) or event (every instruction simulated; npusim kernel's default)"},
    {"kernel.seed", NPU_PT_INT, NPU_PARAM_OFF(seed), 0, "1", NPU_PF_POSITIVE, 0, 0, NULL,
     "seed of the generated inputs (reported)"},
    {"kernel.functional", NPU_PT_BOOL, NPU_PARAM_OFF(functional), 0, "false", 0, 0, 0, NULL,
     "also compute real data and check it against the host reference"},
    {"kernel.load", NPU_PT_STRING, NPU_PARAM_OFF(load), NPU_PARAM_SZ(load), "", 0, 0, 0, NULL,
     "a kernel plugin (shared object, docs/KERNELS.md) providing kernel.op, relative to this file; its parameters "
     "that no built-in operator has go in kernel.args"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

/* ------------------------------------------------------------------ kernel.<param> keys */

#define SLOT_STRING 32

union mc_slot {
  int i;
  double r;
  bool b;
  char s[SLOT_STRING];
};

struct mc_kparams {
  size_t n;
  struct npu_param *params;
  char (*names)[64];            /* "kernel.m" */
  char **descs;
  union mc_slot *slots;         /* the values, the table's target */
  struct npu_table table;
};

static enum npu_ptype cfg_type(enum op_ptype t)
{
  switch (t) {
  case OP_P_DIM:
  case OP_P_INT: return NPU_PT_INT;
  case OP_P_REAL: return NPU_PT_REAL;
  case OP_P_BOOL: return NPU_PT_BOOL;
  default: return NPU_PT_STRING;
  }
}

/* Every parameter name of every operator, once, in registry order; typed by what the
 * operators take (a name two operators type differently is a string, or a number for
 * integer and real). Built once per process (the keys depend on the built-in operators only,
 * and building them was 14% of loading a scenario: bench/scenario/bench_load); each
 * registration gets its own values (kparams_create). */
static struct mc_kparams *kparams_build(void)
{
  size_t nops;
  const struct op_desc *const *ops = op_builtins(&nops); /* the keys never depend on what was loaded */
  size_t cap = 0;
  for (size_t i = 0; i < nops; i++) cap += (size_t)ops[i]->nparams;
  struct mc_kparams *kp = npu_xcalloc(1, sizeof *kp);
  kp->params = npu_xcalloc(cap, sizeof *kp->params);
  kp->names = npu_xcalloc(cap, sizeof *kp->names);
  kp->descs = npu_xcalloc(cap, sizeof *kp->descs);
  struct npu_buf *users = npu_xcalloc(cap, sizeof *users); /* "op1, op2; op1: meaning" */
  size_t *first = npu_xcalloc(cap, sizeof *first);          /* the first operator taking it */
  for (size_t o = 0; o < nops; o++) {
    for (int p = 0; p < ops[o]->nparams; p++) {
      const struct op_param *q = &ops[o]->params[p];
      for (size_t r = 0; r < sizeof params / sizeof params[0]; r++)
        if (!strcmp(params[r].name + 7, q->name))
          NPU_PANIC("operator %s's parameter %s collides with key %s", ops[o]->name, q->name, params[r].name);
      char name[64];
      snprintf(name, sizeof name, "kernel.%s", q->name);
      size_t k = 0;
      while (k < kp->n && strcmp(kp->names[k], name)) k++;
      enum npu_ptype t = cfg_type(q->type);
      if (k == kp->n) {
        kp->n++;
        snprintf(kp->names[k], sizeof kp->names[k], "%s", name);
        kp->params[k] = (struct npu_param){.name = kp->names[k], .type = t, .offset = k * sizeof(union mc_slot),
                                           .size = t == NPU_PT_STRING ? SLOT_STRING : 0, .def = NULL,
                                           .flags = NPU_PF_OPTIONAL | (t == NPU_PT_INT ? NPU_PF_NONNEG : 0)};
        npu_buf_printf(&users[k], "%s", ops[o]->name);
        first[k] = o;
      } else {
        enum npu_ptype have = kp->params[k].type;
        if (have != t) {
          bool numeric = (have == NPU_PT_INT || have == NPU_PT_REAL) && (t == NPU_PT_INT || t == NPU_PT_REAL);
          kp->params[k].type = numeric ? NPU_PT_REAL : NPU_PT_STRING;
          kp->params[k].size = numeric ? 0 : SLOT_STRING;
          kp->params[k].flags = NPU_PF_OPTIONAL;
        }
        npu_buf_printf(&users[k], ", %s", ops[o]->name);
      }
    }
  }
  for (size_t k = 0; k < kp->n; k++) {
    const struct op_desc *d = ops[first[k]];
    npu_buf_printf(&users[k], "%s%s: %s", strchr(npu_buf_str(&users[k]), ',') ? "; " : "",
                   strchr(npu_buf_str(&users[k]), ',') ? d->name : "", d->params[op_param_index(d, kp->names[k] + 7)].desc);
    kp->descs[k] = strdup(npu_buf_str(&users[k]));
    kp->params[k].desc = kp->descs[k];
  }
  for (size_t k = 0; k < cap; k++) npu_buf_release(&users[k]);
  free(users);
  free(first);
  kp->table = (struct npu_table){NULL, 0, kp->params, kp->n};
  return kp;
}

/* The keys (shared, built at the first call, kept for the process) with values of its own. */
static struct mc_kparams *kparams_create(void)
{
  static struct mc_kparams *keys;
  if (!keys) keys = kparams_build();
  struct mc_kparams *kp = npu_xmalloc(sizeof *kp);
  *kp = *keys;
  kp->slots = npu_xcalloc(keys->n ? keys->n : 1, sizeof *kp->slots);
  return kp;
}

static void kparams_destroy(struct mc_kparams *kp)
{
  if (!kp) return;
  free(kp->slots);
  free(kp);
}

/* The key's value as an operator argument's text. */
static void kparam_text(const struct mc_kparams *kp, size_t k, char *buf, size_t n)
{
  const union mc_slot *s = &kp->slots[k];
  switch (kp->params[k].type) {
  case NPU_PT_INT: snprintf(buf, n, "%d", s->i); break;
  case NPU_PT_REAL: npu_fmt_double(s->r, buf, n); break;
  case NPU_PT_BOOL: snprintf(buf, n, "%s", s->b ? "true" : "false"); break;
  default: snprintf(buf, n, "%s", s->s);
  }
}

/* ------------------------------------------------------------------ loading */

void mc__kernel_register(struct npu_cfg *cfg, struct mc_kernel_spec *spec, struct mc_kparams **kp)
{
  memset(spec, 0, sizeof *spec);
  npu_cfg_add_table(cfg, &table, spec);
  *kp = kparams_create();
  npu_cfg_add_table(cfg, &(*kp)->table, (*kp)->slots);
}

void mc__kernel_unregister(struct mc_kparams *kp)
{
  kparams_destroy(kp);
}

void mc_kernel_init(struct mc_kernel_job *job, const char *path)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  mc__kernel_register(job->cfg, &job->spec, &job->kp);
}

static bool key_given(const struct npu_cfg *cfg, const char *key)
{
  const struct npu_origin *o = npu_cfg_origin(cfg, key);
  return o && o->kind != NPU_ORIGIN_UNSET && o->kind != NPU_ORIGIN_DEFAULT;
}

/* Where an operator argument came from, for locating messages about it. */
enum src { SRC_DEFAULT, SRC_ARGS, SRC_KEY };

/*
 * A message of ops/ (command-line flavoured: key "--NAME") moved to the scenario key that gave
 * the argument: kernel.NAME, kernel.args (naming the argument) or kernel.op (a default).
 */
static int relocate(const struct mc_kernel_job *job, int rc, struct npu_diag *diag)
{
  const uint8_t *src = job->arg_src;
  struct npu_diag d = *diag;
  int i = strncmp(d.key, "--", 2) ? -1 : op_param_index(job->op, d.key + 2);
  char key[80];
  if (i >= 0 && src[i] == SRC_KEY) {
    snprintf(key, sizeof key, "kernel.%s", job->op->params[i].name);
    npu_cfg_fail(job->cfg, diag, key, "%s", d.msg);
  } else if (i >= 0 && src[i] == SRC_ARGS) {
    npu_cfg_fail(job->cfg, diag, "kernel.args", "%s: %s", job->op->params[i].name, d.msg);
  } else {
    npu_cfg_fail(job->cfg, diag, "kernel.op", "%s%s%s", i >= 0 ? job->op->params[i].name : "", i >= 0 ? ": " : "",
                 d.msg);
  }
  return rc ? rc : NPU_ECONFIG;
}

static int unknown_param(const struct mc_kernel_job *job, const char *key, const char *name, struct npu_diag *diag)
{
  const struct op_desc *d = job->op;
  const char *names[OP_MAX_PARAMS];
  struct npu_buf all = {0};
  for (int j = 0; j < d->nparams; j++) {
    names[j] = d->params[j].name;
    npu_buf_printf(&all, "%s%s", j ? ", " : "", names[j]);
  }
  const char *s = npu_suggest(name, names, (size_t)d->nparams);
  if (s)
    npu_cfg_fail(job->cfg, diag, key, "operator '%s' has no parameter '%s'; did you mean '%s'?", d->name, name, s);
  else
    npu_cfg_fail(job->cfg, diag, key, "operator '%s' has no parameter '%s' (its parameters: %s)", d->name, name,
                 npu_buf_str(&all));
  npu_buf_release(&all);
  return NPU_ECONFIG;
}

/* The operator's arguments: its defaults, then kernel.args, then the kernel.<name> keys. */
static int parse_args(struct mc_kernel_job *job, struct npu_diag *diag)
{
  const struct op_desc *d = job->op;
  uint8_t *src = job->arg_src;
  memset(job->arg_src, SRC_DEFAULT, sizeof job->arg_src);
  char *kv[OP_MAX_PARAMS];
  int nkv = 0, rc = 0;
  /* kernel.args: whitespace-separated name=value (a bare name is a true boolean) */
  char *copy = strdup(job->spec.args);
  for (char *save = NULL, *tok = strtok_r(copy, " \t\n", &save); tok && !rc; tok = strtok_r(NULL, " \t\n", &save)) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(tok, "="), tok);
    for (char *p = name; *p; p++)
      if (*p == '-') *p = '_';
    int i = op_param_index(d, name);
    if (i < 0) rc = unknown_param(job, "kernel.args", name, diag);
    else if (src[i] == SRC_ARGS)
      rc = npu_cfg_fail(job->cfg, diag, "kernel.args", "'%s' is given twice", name);
    else {
      src[i] = SRC_ARGS;
      const char *eq = strchr(tok, '=');
      size_t n = strlen(name) + (eq ? strlen(eq) : 0) + 2;
      kv[i] = npu_xmalloc(n);
      snprintf(kv[i], n, "%s%s", name, eq ? eq : (d->params[i].type == OP_P_BOOL ? "=true" : "="));
    }
  }
  free(copy);
  /* kernel.<name> keys win over kernel.args */
  for (size_t k = 0; k < job->kp->n && !rc; k++) {
    const char *key = job->kp->names[k];
    if (!key_given(job->cfg, key)) continue;
    int i = op_param_index(d, key + 7);
    if (i < 0) {
      rc = unknown_param(job, key, key + 7, diag);
      break;
    }
    if (src[i] == SRC_ARGS) free(kv[i]);
    char val[SLOT_STRING + 32];
    kparam_text(job->kp, k, val, sizeof val);
    size_t n = strlen(key) + strlen(val) + 2;
    kv[i] = npu_xmalloc(n);
    snprintf(kv[i], n, "%s=%s", key + 7, val);
    src[i] = SRC_KEY;
  }
  for (int i = 0; i < d->nparams && !rc; i++)
    if (!d->params[i].def && src[i] == SRC_DEFAULT)
      rc = npu_cfg_fail(job->cfg, diag, "kernel.op", "'%s' needs %s (%s): set kernel.%s, or %s=... in kernel.args",
                        d->name, d->params[i].name, d->params[i].desc, d->params[i].name, d->params[i].name);
  /* in parameter order, so that the same arguments parse the same whatever their source */
  const char *list[OP_MAX_PARAMS];
  for (int i = 0; i < d->nparams; i++)
    if (src[i] != SRC_DEFAULT) list[nkv++] = kv[i];
  if (!rc && op_args_parse(d, &job->args, list, nkv, diag)) rc = relocate(job, NPU_ECONFIG, diag);
  if (!rc) {
    /* the chip must take the shape: the operator's own checks, before anything runs */
    void *plan = npu_xcalloc(1, d->plan_size);
    int prc = d->plan(plan, d, &job->args, &job->sys.chip, diag);
    if (d->release) d->release(plan);
    free(plan);
    if (prc) rc = relocate(job, NPU_ECONFIG, diag);
  }
  for (int i = 0; i < d->nparams; i++)
    if (src[i] != SRC_DEFAULT) free(kv[i]);
  if (!rc) op_args_format(d, &job->args, job->args_text, sizeof job->args_text);
  return rc;
}

int mc_kernel_finish(struct mc_kernel_job *job, struct npu_diag *diag)
{
  int rc = npu_cfg_finish(job->cfg, diag);
  if (!rc) rc = arch_finish(job->cfg, &job->sys, diag);
  if (rc) return rc;
  if (!npu_cfg_section_present(job->cfg, "kernel"))
    return npu_diag_set(diag, job->path, 0, "kernel", "the scenario has no kernel section"), NPU_ECONFIG;
  if (job->spec.load[0]) {
    char shown[1024], path[2048];
    struct npu_diag d;
    if (!npu_cfg_resolve_path(job->cfg, "kernel.load", job->spec.load, shown, sizeof shown, path, sizeof path))
      return npu_cfg_fail(job->cfg, diag, "kernel.load", "the path is too long");
    if (op_plugin_load(path, "kernel.load", &d)) return npu_cfg_fail(job->cfg, diag, "kernel.load", "%s: %s", shown, d.msg);
  }
  job->op = op_find(job->spec.op);
  if (!job->op) {
    const char *s = op_suggest(job->spec.op);
    if (s)
      npu_cfg_fail(job->cfg, diag, "kernel.op", "unknown operator '%s'; did you mean '%s'?", job->spec.op, s);
    else
      npu_cfg_fail(job->cfg, diag, "kernel.op", "unknown operator '%s' (see 'npusim kernel list')", job->spec.op);
    return NPU_ECONFIG;
  }
  return parse_args(job, diag);
}

int mc_kernel_load(struct mc_kernel_job *job, const char *path, const char *const *sets, int nsets,
                   struct npu_diag *diag)
{
  mc_kernel_init(job, path);
  int rc = npu_cfg_load_file(job->cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(job->cfg, sets[i], diag);
  if (!rc) rc = mc_kernel_finish(job, diag);
  return rc;
}

void mc_kernel_release(struct mc_kernel_job *job)
{
  if (job->cfg) npu_cfg_destroy(job->cfg);
  kparams_destroy(job->kp);
  memset(job, 0, sizeof *job);
}

int mc_kernel_param_value(const struct mc_kernel_job *job, const char *key, double *out, struct npu_diag *diag)
{
  int i = strncmp(key, "kernel.", 7) ? -1 : op_param_index(job->op, key + 7);
  if (i < 0)
    return npu_diag_set(diag, NULL, 0, key, "not a parameter of operator '%s'", job->op->name), NPU_EINVAL;
  switch (job->op->params[i].type) {
  case OP_P_DIM:
  case OP_P_INT:
  case OP_P_BOOL: *out = (double)job->args.u[i]; return 0;
  case OP_P_REAL: *out = job->args.r[i]; return 0;
  default: return npu_diag_set(diag, NULL, 0, key, "'%s' is not a number", job->op->params[i].name), NPU_EINVAL;
  }
}

int mc_kernel_run(struct mc_kernel_job *job, struct npu_trace *trace, struct op_result *res, struct npu_diag *diag)
{
  struct op_run_opts opts = {.fidelity = (enum core_fidelity)job->spec.fidelity,
                             .functional = job->spec.functional,
                             .seed = (uint64_t)job->spec.seed,
                             .trace = trace,
                             .progress = job->progress,
                             .node = job->sys.has_node ? &job->sys.node : NULL};
  int rc = op_run(job->op, &job->args, &job->sys.chip, &opts, res, diag);
  if (rc == NPU_EINVAL || rc == NPU_EUNSUPPORTED || rc == NPU_ENOFIT) return relocate(job, rc, diag);
  if (!rc && res->checked && !res->passed)
    return npu_diag_set(diag, job->path, 0, "kernel.functional", "functional check failed: %s", res->check_summary),
           NPU_EINTERNAL;
  return rc;
}

/* ------------------------------------------------------------------ reports */

struct ratio {
  const char *name;
  double v;
};

static void ratios(const struct core_result *r, struct ratio out[9])
{
  struct ratio x[9] = {{"aic_mac_ratio", r->aic_mac_ratio},       {"aic_mte1_ratio", r->aic_mte1_ratio},
                       {"aic_mte2_ratio", r->aic_mte2_ratio},     {"aic_fixpipe_ratio", r->aic_fixpipe_ratio},
                       {"aic_scalar_ratio", r->aic_scalar_ratio}, {"aiv_vec_ratio", r->aiv_vec_ratio},
                       {"aiv_mte2_ratio", r->aiv_mte2_ratio},     {"aiv_mte3_ratio", r->aiv_mte3_ratio},
                       {"aiv_scalar_ratio", r->aiv_scalar_ratio}};
  memcpy(out, x, sizeof x);
}

/* A kernel's figures as people read them, the same in its text report and its page. */
struct kfacts {
  char tiling[256];   /* "" when no search ran */
  char time[192], achieved[160], gm[224], cores[96];
  char check[320];    /* "" when no functional check ran */
};

static void kernel_facts(const struct op_result *r, struct kfacts *f)
{
  const struct core_result *t = &r->total;
  char a[64], b[64];
  f->tiling[0] = f->check[0] = '\0';
  if (r->searched)
    snprintf(f->tiling, sizeof f->tiling, "searched %d candidate%s at analytic fidelity: %s", r->searched,
             r->searched == 1 ? "" : "s", r->chosen[0] ? r->chosen : "the default");
  npu_fmt_human_time(t->time_s, a, sizeof a);
  npu_fmt_human_time(t->launch_s, b, sizeof b);
  snprintf(f->time, sizeof f->time, "%s (launch overhead %s, %d kernel%s)", a, b, r->nkernels,
           r->nkernels == 1 ? "" : "s");
  npu_fmt_human(r->achieved_flops_per_s, "FLOP/s", a, sizeof a);
  npu_fmt_human(r->flops, "FLOP", b, sizeof b);
  snprintf(f->achieved, sizeof f->achieved, "%s (%s)", a, b);
  npu_fmt_human(r->gm_bytes_per_s, "B/s", a, sizeof a);
  npu_fmt_human(t->hbm_bw_bytes_per_s, "B/s", b, sizeof b);
  snprintf(f->gm, sizeof f->gm, "%s (HBM %s, L2 hits %.1f%%)", a, b,
           t->l2_hit_bytes ? 100.0 * (double)t->l2_hit_bytes / (double)(t->gm_read_bytes + t->gm_write_bytes) : 0.0);
  snprintf(f->cores, sizeof f->cores, "%d/%d cube, %d/%d vector", t->aic_used, t->aic_total, t->aiv_used,
           t->aiv_total);
  if (t->ranks > 1) { /* a kernel over a server's devices (all_gather_matmul) */
    size_t len = strlen(f->cores);
    npu_fmt_human((double)t->link_bytes, "B", a, sizeof a);
    snprintf(f->cores + len, sizeof f->cores - len, " on %d devices (%s across their links)", t->ranks, a);
  }
  if (r->checked) snprintf(f->check, sizeof f->check, "%s: %s", r->passed ? "passed" : "FAILED", r->check_summary);
}

void mc_kernel_text(const struct op_desc *d, const char *args, const struct arch_system *sys, const char *fid,
                    const struct op_result *r, struct npu_buf *o)
{
  const struct core_result *t = &r->total;
  struct kfacts f;
  kernel_facts(r, &f);
  npu_buf_printf(o, "%s %s on %s (%s fidelity)\n", d->name, args, sys->chip.name, fid);
  if (f.tiling[0]) npu_buf_printf(o, "  tiling            %s\n", f.tiling);
  npu_buf_printf(o, "  time              %s\n  achieved          %s\n  GM traffic        %s\n  cores             %s\n",
                 f.time, f.achieved, f.gm, f.cores);
  struct ratio x[9];
  ratios(t, x);
  npu_buf_puts(o, "  pipes            ");
  for (int i = 0; i < 9; i++)
    if (x[i].v > 0) npu_buf_printf(o, " %s %.3f", x[i].name, x[i].v);
  npu_buf_printf(o, "\n  bottleneck        %s\n", t->bottleneck);
  if (f.check[0]) npu_buf_printf(o, "  functional check  %s\n", f.check);
}

void mc_kernel_html(const char *path, const struct op_desc *d, const char *args, const struct arch_system *sys,
                    const char *fid, const struct op_result *r, struct npu_buf *o)
{
  const struct core_result *t = &r->total;
  struct kfacts f;
  kernel_facts(r, &f);
  char title[256], what[1280];
  snprintf(title, sizeof title, "%s on %s", d->name, sys->chip.name);
  snprintf(what, sizeof what, "%s %s (%s fidelity)", d->name, args, fid);
  rpt_html_begin(o, title);
  const char *names[] = {"scenario", "operator", "chip", "tiling", "time", "achieved", "GM traffic", "cores",
                         "bottleneck", "functional check"};
  const char *values[] = {path, what, sys->chip.name, f.tiling[0] ? f.tiling : "as given (no search)", f.time, f.achieved,
                          f.gm, f.cores, t->bottleneck, f.check[0] ? f.check : "not run (timing only)"};
  rpt_html_facts(o, names, values, 10);
  rpt_html_heading(o, "Pipes");
  rpt_html_para(o, "The share of the kernel's time each pipe of the cores that ran was busy (msprof's *_ratio "
                   "columns, averaged over the cores used): the longest bar is where the time goes.");
  struct ratio x[9];
  ratios(t, x);
  const char *rows[9];
  double v[9];
  int n = 0;
  for (int i = 0; i < 9; i++)
    if (x[i].v > 0) rows[n] = x[i].name, v[n++] = 100 * x[i].v;
  static const char *const series[] = {"busy"};
  struct rpt_html_chart ch = {series, 1, rows, n, v, 100, "%", 1, 0, NULL};
  rpt_html_bars(o, &ch);
  if (r->nkernels > 1) {
    rpt_html_heading(o, "Launches");
    static const char *const head[] = {"kernel", "time", "launch overhead", "cube cores", "vector cores", "bottleneck"};
    rpt_html_table_begin(o, head, 6);
    for (int k = 0; k < r->nkernels; k++) {
      const struct core_result *c = &r->kernel[k];
      char idx[16], tm[64], lo[64], ac[32], av[32];
      snprintf(idx, sizeof idx, "%d", k + 1);
      npu_fmt_human_time(c->time_s, tm, sizeof tm);
      npu_fmt_human_time(c->launch_s, lo, sizeof lo);
      snprintf(ac, sizeof ac, "%d/%d", c->aic_used, c->aic_total);
      snprintf(av, sizeof av, "%d/%d", c->aiv_used, c->aiv_total);
      const char *cells[] = {idx, tm, lo, ac, av, c->bottleneck};
      rpt_html_row(o, cells, 6);
    }
    rpt_html_table_end(o);
  }
  rpt_html_heading(o, "Text report");
  struct npu_buf txt = {0};
  mc_kernel_text(d, args, sys, fid, r, &txt);
  rpt_html_pre(o, npu_buf_str(&txt));
  npu_buf_release(&txt);
  rpt_html_end(o);
}

void mc_kernel_json(const struct op_desc *d, const char *args, const struct arch_system *sys, const char *fid,
                    uint64_t seed, const struct op_result *r, struct npu_buf *o)
{
  const struct core_result *t = &r->total;
  struct npu_json j;
  npu_json_init(&j, o);
  npu_json_object_begin(&j);
  npu_json_key(&j, "op");
  npu_json_string(&j, d->name);
  npu_json_key(&j, "args");
  npu_json_string(&j, args);
  npu_json_key(&j, "arch");
  npu_json_string(&j, sys->chip.name);
  npu_json_key(&j, "fidelity");
  npu_json_string(&j, fid);
  npu_json_key(&j, "seed");
  npu_json_int(&j, (int64_t)seed);
  /* the flat figures: columns of summary.csv (they read the result only) */
  static const char *const flat[] = {"time_s", "launch_s", "flops", "achieved_flops_per_s", "gm_bytes_per_s",
                                     "hbm_bw_bytes_per_s", "gm_read_bytes", "gm_write_bytes", "l2_hit_bytes"};
  struct mc_kernel_report fx = {NULL, r};
  rpt_columns_json_some(mc_kernel_columns(), &fx, flat, (int)(sizeof flat / sizeof flat[0]), &j);
  npu_json_key(&j, "tiling_candidates");
  npu_json_int(&j, r->searched);
  npu_json_key(&j, "tiling_chosen");
  npu_json_string(&j, r->chosen);
  npu_json_key(&j, "bottleneck");
  npu_json_string(&j, t->bottleneck);
  npu_json_key(&j, "pipes");
  npu_json_object_begin(&j);
  struct ratio x[9];
  ratios(t, x);
  for (int i = 0; i < 9; i++) {
    npu_json_key(&j, x[i].name);
    npu_json_number(&j, x[i].v);
  }
  npu_json_object_end(&j);
  npu_json_key(&j, "cores");
  npu_json_object_begin(&j);
  npu_json_key(&j, "aic_used");
  npu_json_int(&j, t->aic_used);
  npu_json_key(&j, "aic_total");
  npu_json_int(&j, t->aic_total);
  npu_json_key(&j, "aiv_used");
  npu_json_int(&j, t->aiv_used);
  npu_json_key(&j, "aiv_total");
  npu_json_int(&j, t->aiv_total);
  npu_json_object_end(&j);
  npu_json_key(&j, "devices");
  npu_json_int(&j, t->ranks > 1 ? t->ranks : 1);
  npu_json_key(&j, "link_bytes");
  npu_json_int(&j, (int64_t)t->link_bytes);
  npu_json_key(&j, "instructions");
  npu_json_int(&j, (int64_t)t->instructions);
  npu_json_key(&j, "bank_conflict_cycles");
  npu_json_int(&j, (int64_t)t->bank_conflict_cycles);
  npu_json_key(&j, "kernels");
  npu_json_array_begin(&j);
  for (int i = 0; i < r->nkernels; i++) {
    npu_json_object_begin(&j);
    npu_json_key(&j, "time_s");
    npu_json_number(&j, r->kernel[i].time_s);
    npu_json_key(&j, "bottleneck");
    npu_json_string(&j, r->kernel[i].bottleneck);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  if (r->checked) {
    npu_json_key(&j, "check");
    npu_json_object_begin(&j);
    npu_json_key(&j, "passed");
    npu_json_bool(&j, r->passed);
    npu_json_key(&j, "max_error_of_tolerance");
    npu_json_number(&j, r->max_err);
    npu_json_key(&j, "summary");
    npu_json_string(&j, r->check_summary);
    npu_json_object_end(&j);
  }
  npu_json_object_end(&j);
  npu_json_finish(&j);
}

/* ------------------------------------------------------------------ columns */

#define J(ctx) (((const struct mc_kernel_report *)(ctx))->job)
#define R(ctx) (((const struct mc_kernel_report *)(ctx))->res)
#define T(ctx) (&R(ctx)->total)

static const char *c_scenario(const void *x, int i) { (void)i; return J(x)->path; }
static const char *c_op(const void *x, int i) { (void)i; return J(x)->op->name; }
static const char *c_args(const void *x, int i) { (void)i; return J(x)->args_text; }
static const char *c_system(const void *x, int i) { (void)i; return J(x)->sys.chip.name; }
static const char *c_fidelity(const void *x, int i) { (void)i; return fid_names[J(x)->spec.fidelity]; }
static long long c_seed(const void *x, int i) { (void)i; return J(x)->spec.seed; }
static double c_time(const void *x, int i) { (void)i; return T(x)->time_s; }
static double c_launch(const void *x, int i) { (void)i; return T(x)->launch_s; }
static double c_flops(const void *x, int i) { (void)i; return R(x)->flops; }
static double c_achieved(const void *x, int i) { (void)i; return R(x)->achieved_flops_per_s; }
static double c_gm_bw(const void *x, int i) { (void)i; return R(x)->gm_bytes_per_s; }
static double c_hbm_bw(const void *x, int i) { (void)i; return T(x)->hbm_bw_bytes_per_s; }
static long long c_gm_read(const void *x, int i) { (void)i; return (long long)T(x)->gm_read_bytes; }
static long long c_gm_write(const void *x, int i) { (void)i; return (long long)T(x)->gm_write_bytes; }
static long long c_l2_hit(const void *x, int i) { (void)i; return (long long)T(x)->l2_hit_bytes; }
static long long c_kernels(const void *x, int i) { (void)i; return R(x)->nkernels; }
static long long c_instructions(const void *x, int i) { (void)i; return (long long)T(x)->instructions; }
static long long c_aic_used(const void *x, int i) { (void)i; return T(x)->aic_used; }
static long long c_aic_total(const void *x, int i) { (void)i; return T(x)->aic_total; }
static long long c_aiv_used(const void *x, int i) { (void)i; return T(x)->aiv_used; }
static long long c_aiv_total(const void *x, int i) { (void)i; return T(x)->aiv_total; }
static long long c_devices(const void *x, int i) { (void)i; return T(x)->ranks > 1 ? T(x)->ranks : 1; }
static long long c_link_bytes(const void *x, int i) { (void)i; return (long long)T(x)->link_bytes; }
static double c_ratio(const void *x, int i)
{
  struct ratio r[9];
  ratios(T(x), r);
  return r[i].v;
}
static const char *ratio_name(int i)
{
  static const char *const names[] = {"aic_mac", "aic_mte1", "aic_mte2", "aic_fixpipe", "aic_scalar",
                                      "aiv_vec", "aiv_mte2", "aiv_mte3", "aiv_scalar"};
  return names[i];
}
static const char *c_check(const void *x, int i)
{
  (void)i;
  return R(x)->checked ? (R(x)->passed ? "passed" : "failed") : "";
}
static const char *c_bottleneck(const void *x, int i) { (void)i; return T(x)->bottleneck; }

/* summary.csv of a kernel scenario; units in the names, the order is the contract. */
static const struct rpt_column kernel_columns[] = {
    {"scenario", RPT_STRING, "text", "the scenario file (or the sweep point's name)", .text = c_scenario},
    {"op", RPT_STRING, "text", "the operator (npusim kernel list)", .text = c_op},
    {"args", RPT_STRING, "text", "the operator's arguments, canonical", .text = c_args},
    {"system", RPT_STRING, "text", "the chip's name", .text = c_system},
    {"fidelity", RPT_STRING, "text", "event or analytic", .text = c_fidelity},
    {"seed", RPT_INT, "", "seed of the input generator", .integer = c_seed},
    {"time_s", RPT_REAL, "s", "kernel time, launch overhead included", .real = c_time},
    {"launch_s", RPT_REAL, "s", "launch overhead", .real = c_launch},
    {"flops", RPT_REAL, "FLOP", "floating-point operations of the operator", .real = c_flops},
    {"achieved_flops_per_s", RPT_REAL, "FLOP/s", "flops / time_s", .real = c_achieved},
    {"gm_bytes_per_s", RPT_REAL, "bytes/s", "GM traffic (reads and writes) / time_s", .real = c_gm_bw},
    {"hbm_bw_bytes_per_s", RPT_REAL, "bytes/s", "HBM traffic (L2 misses) / time_s", .real = c_hbm_bw},
    {"gm_read_bytes", RPT_INT, "bytes", "bytes read from GM", .integer = c_gm_read},
    {"gm_write_bytes", RPT_INT, "bytes", "bytes written to GM", .integer = c_gm_write},
    {"l2_hit_bytes", RPT_INT, "bytes", "GM bytes served by the L2", .integer = c_l2_hit},
    {"kernels", RPT_INT, "", "kernel launches of the operator", .integer = c_kernels},
    {"instructions", RPT_INT, "", "instructions executed, all cores", .integer = c_instructions},
    {"aic_used", RPT_INT, "", "cube cores used", .integer = c_aic_used},
    {"aic_total", RPT_INT, "", "cube cores of the chip (of all its devices for an operator over several)",
     .integer = c_aic_total},
    {"aiv_used", RPT_INT, "", "vector cores used", .integer = c_aiv_used},
    {"aiv_total", RPT_INT, "", "vector cores of the chip (of all its devices for an operator over several)",
     .integer = c_aiv_total},
    {"devices", RPT_INT, "", "devices the kernel ran on at once: 1, or a server's for the MC2 operators",
     .integer = c_devices},
    {"link_bytes", RPT_INT, "bytes", "bytes copied between devices across their links", .integer = c_link_bytes},
    {"%s_ratio", RPT_REAL, "fraction", "busy share of the kernel time of the pipe %s (msprof's name)",
     .real = c_ratio, .count = 9, .index_name = ratio_name, .index_desc = ratio_name},
    {"check", RPT_STRING, "text", "functional check: passed, failed, or empty when not run", .text = c_check},
    {"bottleneck", RPT_STRING, "text", "what bounds the kernel, in words", .text = c_bottleneck},
    {NULL},
};

#undef J
#undef R
#undef T

const struct rpt_column *mc_kernel_columns(void)
{
  return kernel_columns;
}

void mc_kernel_csv_header(struct npu_buf *out)
{
  rpt_columns_csv_header(kernel_columns, out);
}

void mc_kernel_csv_row(const struct mc_kernel_job *job, const struct op_result *r, struct npu_buf *out)
{
  struct mc_kernel_report x = {job, r};
  rpt_columns_csv_row(kernel_columns, &x, out);
}
