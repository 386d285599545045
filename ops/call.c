/* call.c - typed operator calls, checked as they are built, and the shared backward rules; see op.h. */
#include "ops/op.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"
#include "common/units.h"
#include "ops/ops_int.h"

/* Record the call's first error (later ones are dropped: the first is the cause). */
static void __attribute__((format(printf, 3, 4))) fail(struct op_call *c, const char *param, const char *fmt, ...)
{
  if (c->err) return;
  c->err = NPU_EINVAL;
  if (param)
    snprintf(c->key, sizeof c->key, "%s.%s", c->name, param);
  else
    snprintf(c->key, sizeof c->key, "%s", c->name);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->msg, sizeof c->msg, fmt, ap);
  va_end(ap);
}

/* "workloads/expand.c" of "/src/npusim/workloads/expand.c": the last two parts of a path. */
static const char *short_path(const char *file)
{
  const char *last = strrchr(file, '/');
  if (!last) return file;
  const char *p = last;
  while (p > file && p[-1] != '/') p--;
  return p;
}

void op_call_init_at(struct op_call *c, const char *name, const char *file, int line)
{
  memset(c, 0, sizeof *c);
  c->name = name;
  c->file = short_path(file);
  c->line = line;
  c->desc = op_find(name);
  if (!c->desc) {
    const char *s = op_suggest(name);
    if (s)
      fail(c, NULL, "unknown operator '%s'; did you mean '%s'?", name, s);
    else
      fail(c, NULL, "unknown operator '%s' (see 'npusim kernel list')", name);
    return;
  }
  /* the defaults, through the command line's parser; it fails only on a required parameter,
   * which op_call_check reports if it is still unset then */
  struct npu_diag d;
  (void)op_args_parse(c->desc, &c->args, NULL, 0, &d);
}

/* The index of a parameter of type one of want[0..1], or -1 with the call's error set. */
static int lookup(struct op_call *c, const char *param, enum op_ptype t0, enum op_ptype t1, const char *what)
{
  if (c->err) return -1;
  const struct op_desc *d = c->desc;
  int i = op_param_index(d, param);
  if (i < 0) {
    const char *names[OP_MAX_PARAMS];
    for (int j = 0; j < d->nparams; j++) names[j] = d->params[j].name;
    const char *s = npu_suggest(param, names, (size_t)d->nparams);
    if (s)
      fail(c, NULL, "'%s' has no parameter '%s'; did you mean '%s'?", d->name, param, s);
    else
      fail(c, NULL, "'%s' has no parameter '%s' (see 'npusim kernel list')", d->name, param);
    return -1;
  }
  if (d->params[i].type != t0 && d->params[i].type != t1) {
    fail(c, param, "is not %s (see 'npusim kernel list')", what);
    return -1;
  }
  return i;
}

void op_call_dim(struct op_call *c, const char *param, int64_t v)
{
  int i = lookup(c, param, OP_P_DIM, OP_P_INT, "a dimension or count");
  if (i < 0) return;
  bool dim = c->desc->params[i].type == OP_P_DIM;
  if (v < (dim ? 1 : 0)) {
    fail(c, param, "must be at least %d, got %" PRId64, dim ? 1 : 0, v);
    return;
  }
  c->args.u[i] = (uint64_t)v;
  c->given |= 1u << i;
}

void op_call_dtype(struct op_call *c, const char *param, enum npu_dtype t)
{
  int i = lookup(c, param, OP_P_DTYPE, OP_P_DTYPE, "a dtype");
  if (i < 0) return;
  if ((int)t < 0 || t >= NPU_DT_COUNT) {
    fail(c, param, "not a dtype: %d", (int)t);
    return;
  }
  c->args.u[i] = (uint64_t)t;
  c->given |= 1u << i;
}

void op_call_bool(struct op_call *c, const char *param, bool v)
{
  int i = lookup(c, param, OP_P_BOOL, OP_P_BOOL, "true / false");
  if (i < 0) return;
  c->args.u[i] = v;
  c->given |= 1u << i;
}

void op_call_choice(struct op_call *c, const char *param, const char *choice)
{
  int i = lookup(c, param, OP_P_CHOICE, OP_P_CHOICE, "a choice");
  if (i < 0) return;
  const char *const *ch = c->desc->params[i].choices;
  size_t n = 0;
  for (; ch[n]; n++)
    if (!strcmp(ch[n], choice)) {
      c->args.u[i] = n;
      c->given |= 1u << i;
      return;
    }
  const char *s = npu_suggest(choice, ch, n);
  if (s)
    fail(c, param, "unknown value '%s'; did you mean '%s'?", choice, s);
  else
    fail(c, param, "unknown value '%s'", choice);
}

void op_call_real(struct op_call *c, const char *param, double v)
{
  int i = lookup(c, param, OP_P_REAL, OP_P_REAL, "a number");
  if (i < 0) return;
  if (!isfinite(v)) {
    fail(c, param, "expected a finite number");
    return;
  }
  c->args.r[i] = v;
  c->given |= 1u << i;
}

void op_call_copy_given(struct op_call *dst, const struct op_call *src)
{
  NPU_ASSERT(src->desc != NULL);
  if (dst->err) return;
  for (int i = 0; i < src->desc->nparams; i++) {
    if (!(src->given & (1u << i))) continue;
    const struct op_param *p = &src->desc->params[i];
    int k = op_param_index(dst->desc, p->name);
    if (k < 0 || dst->desc->params[k].type != p->type) continue;
    if (p->type == OP_P_CHOICE) { /* by name: the two tables may list choices differently */
      op_call_choice(dst, p->name, p->choices[src->args.u[i]]);
      continue;
    }
    dst->args.u[k] = src->args.u[i];
    dst->args.r[k] = src->args.r[i];
    dst->given |= 1u << k;
  }
}

/* The first required parameter left unset, or -1. */
static int missing(const struct op_call *c)
{
  for (int i = 0; i < c->desc->nparams; i++)
    if (!c->desc->params[i].def && !(c->given & (1u << i))) return i;
  return -1;
}

bool op_call_ok(const struct op_call *c)
{
  return !c->err && missing(c) < 0;
}

int op_call_check(const struct op_call *c, struct npu_diag *diag)
{
  if (c->err) return npu_diag_set(diag, c->file, c->line, c->key, "%s", c->msg), NPU_EINVAL;
  int i = missing(c);
  if (i >= 0) {
    const struct op_param *p = &c->desc->params[i];
    char key[96];
    snprintf(key, sizeof key, "%s.%s", c->name, p->name);
    return npu_diag_set(diag, c->file, c->line, key, "required (%s) but not set", p->desc), NPU_EINVAL;
  }
  return 0;
}

uint64_t op_call_u(const struct op_call *c, const char *param)
{
  NPU_ASSERT(c->desc != NULL);
  return op_u(c->desc, &c->args, param);
}

bool op_call_equal(const struct op_call *a, const struct op_call *b)
{
  if (a->desc != b->desc || a->given != b->given || a->err || b->err || !a->desc) return false;
  for (int i = 0; i < a->desc->nparams; i++)
    if (a->args.u[i] != b->args.u[i] || memcmp(&a->args.r[i], &b->args.r[i], sizeof a->args.r[i])) return false;
  return true;
}

void op_call_args_text(const struct op_call *c, char *buf, size_t n)
{
  size_t off = 0;
  buf[0] = '\0';
  if (!c->desc) return;
  for (int i = 0; i < c->desc->nparams && off < n; i++) {
    if (!(c->given & (1u << i))) continue;
    const struct op_param *p = &c->desc->params[i];
    char v[64];
    switch (p->type) {
    case OP_P_REAL: npu_fmt_double(c->args.r[i], v, sizeof v); break;
    case OP_P_DTYPE: snprintf(v, sizeof v, "%s", npu_dtype_name((enum npu_dtype)c->args.u[i])); break;
    case OP_P_CHOICE: snprintf(v, sizeof v, "%s", p->choices[c->args.u[i]]); break;
    case OP_P_BOOL: snprintf(v, sizeof v, "%s", c->args.u[i] ? "true" : "false"); break;
    default: snprintf(v, sizeof v, "%" PRIu64, c->args.u[i]);
    }
    int w = snprintf(buf + off, n - off, "%s%s=%s", off ? " " : "", p->name, v);
    if (w > 0) off += (size_t)w;
  }
}

void op_call_label(const struct op_call *c, char *buf, size_t n)
{
  int w = snprintf(buf, n, "%s ", c->name);
  if (w > 0 && (size_t)w < n) op_call_args_text(c, buf + w, n - (size_t)w);
}

int op_call_backward(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  if (!op_call_ok(fwd)) { /* the error travels on, to be reported where the call is checked */
    out[0] = *fwd;
    grad[0] = OP_GRAD_INPUT;
    return 1;
  }
  const struct op_bwd *b = &fwd->desc->bwd;
  if (b->kind == OP_BWD_NONE || !b->build) return 0;
  int n = b->build(fwd, out, grad);
  NPU_ASSERT(n >= 0 && n <= OP_MAX_BWD_CALLS);
  return n;
}

const char *op_bwd_kind_name(enum op_bwd_kind k)
{
  switch (k) {
  case OP_BWD_NONE: return "none";
  case OP_BWD_KERNEL: return "kernel";
  case OP_BWD_PROXY: return "proxy";
  }
  return "?";
}

/* ------------------------------------------------------------------ shared backward rules */

int op__bwd_same(const struct op_call *fwd, struct op_call *out, enum op_grad *grad)
{
  out[0] = *fwd;
  grad[0] = OP_GRAD_INPUT;
  return 1;
}
