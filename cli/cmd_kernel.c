/*
 * cmd_kernel.c - `npusim kernel`: list the operators, or run one on a chip (timing, and
 * optionally functional with a reference check) and print time, achieved rates, pipe ratios
 * and the bottleneck.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/cfg.h"
#include "common/err.h"
#include "common/json.h"
#include "common/units.h"
#include "micro/micro.h"
#include "ops/op.h"
#include "ops/plugin.h"
#include "report/chrome.h"

static const char usage[] =
    "usage: npusim kernel list [--load FILE]... [--json]\n"
    "       npusim kernel OP --help [--load FILE]...\n"
    "       npusim kernel OP [--PARAM VALUE]... [--arch PRESET|FILE] [--set KEY=VALUE]...\n"
    "                        [--fidelity event|analytic] [--functional] [--seed N] [--json]\n"
    "                        [--trace FILE] [--load FILE]...\n"
    "\n"
    "Runs operator OP (see 'npusim kernel list' for the operators, 'npusim kernel OP --help' for\n"
    "one operator's parameters) on the chip model and prints its time, achieved FLOP/s and GM\n"
    "bandwidth, the msprof pipe ratios and the bottleneck. Example:\n"
    "  npusim kernel gemm --m 8192 --n 8192 --k 8192 --dtype bf16 --arch ascend-910b2 --json\n"
    "\n"
    "options:\n"
    "  --arch NAME|FILE   hardware (default ascend-910b2); --set overrides its keys\n"
    "  --fidelity F       event (SimGrid, every instruction; default) or analytic (closed form)\n"
    "  --functional       also compute real data and check it against the host reference\n"
    "  --seed N           seed of the generated inputs (default 1)\n"
    "  --json             print JSON: .time_s, .achieved_flops_per_s, .bottleneck, .pipes.<ratio>\n"
    "  --trace FILE       write a Chrome trace (Perfetto) of every instruction (event fidelity)\n"
    "  --load FILE        load the operators of a kernel plugin (a shared object built against\n"
    "                     `pkg-config --cflags npusim-kernel`; see docs/KERNELS.md), repeatable\n";

/* Load the plugins named by --load FILE / --load=FILE and take those arguments out of argv
 * (argc shrinks). 0 or NPU_ECONFIG / NPU_EINVAL with diag. */
static int take_loads(int *argc, char **argv, struct npu_diag *diag)
{
  int n = 1;
  for (int i = 1; i < *argc; i++) {
    const char *file = NULL;
    if (!strcmp(argv[i], "--load")) {
      if (i + 1 >= *argc) return npu_diag_set(diag, "command line", 0, "--load", "needs a shared object's path");
      file = argv[++i];
    } else if (!strncmp(argv[i], "--load=", 7)) {
      file = argv[i] + 7;
    }
    if (!file) {
      argv[n++] = argv[i];
      continue;
    }
    int rc = op_plugin_load(file, "--load", diag);
    if (rc) return rc;
  }
  *argc = n;
  argv[n] = NULL;
  return 0;
}

/* The names of every operator (caller frees the array). */
static const char **op_names(size_t *n)
{
  const struct op_desc *const *ops = op_all(n);
  const char **names = npu_xcalloc(*n, sizeof *names);
  for (size_t i = 0; i < *n; i++) names[i] = ops[i]->name;
  return names;
}

static const char *ptype_name(enum op_ptype t)
{
  switch (t) {
  case OP_P_DIM: return "dim";
  case OP_P_INT: return "int";
  case OP_P_DTYPE: return "dtype";
  case OP_P_BOOL: return "bool";
  case OP_P_CHOICE: return "choice";
  case OP_P_REAL: return "number";
  }
  return "?";
}

/* An operator as `kernel list` and `kernel OP --help` print it: name, summary, origin, the
 * parameters with their types and defaults, the backward rule. */
static void describe(const struct op_desc *d, struct npu_buf *out)
{
  npu_buf_printf(out, "%s\n  %s\n", d->name, d->summary);
  if (op_origin(d)) npu_buf_printf(out, "  loaded from %s\n", op_origin(d));
  for (int p = 0; p < d->nparams; p++) {
    const struct op_param *q = &d->params[p];
    char head[96];
    snprintf(head, sizeof head, "--%s %s", q->name, ptype_name(q->type));
    npu_buf_printf(out, "    %-24s %s%s%s%s\n", head, q->desc, q->def ? " [" : " [required", q->def ? q->def : "", "]");
    if (q->type == OP_P_CHOICE) {
      npu_buf_printf(out, "    %-24s one of:", "");
      for (int c = 0; q->choices[c]; c++) npu_buf_printf(out, " %s", q->choices[c]);
      npu_buf_printf(out, "\n");
    }
  }
  const struct op_bwd *b = &d->bwd;
  npu_buf_printf(out, "  backward (%s): %s\n", op_bwd_kind_name(b->kind), b->rule ? b->rule : "");
  if (b->reason) npu_buf_printf(out, "    why: %s\n", b->reason);
}

/* An operator as `kernel list --json` prints it. */
static void describe_json(const struct op_desc *d, struct npu_json *j)
{
  npu_json_object_begin(j);
  npu_json_key(j, "name");
  npu_json_string(j, d->name);
  npu_json_key(j, "summary");
  npu_json_string(j, d->summary);
  npu_json_key(j, "origin");
  npu_json_string(j, op_origin(d) ? op_origin(d) : "built-in");
  npu_json_key(j, "params");
  npu_json_array_begin(j);
  for (int p = 0; p < d->nparams; p++) {
    const struct op_param *q = &d->params[p];
    npu_json_object_begin(j);
    npu_json_key(j, "name");
    npu_json_string(j, q->name);
    npu_json_key(j, "type");
    npu_json_string(j, ptype_name(q->type));
    npu_json_key(j, "default");
    if (q->def) npu_json_string(j, q->def); else npu_json_null(j);
    npu_json_key(j, "description");
    npu_json_string(j, q->desc);
    npu_json_object_end(j);
  }
  npu_json_array_end(j);
  const struct op_bwd *b = &d->bwd;
  npu_json_key(j, "backward");
  npu_json_object_begin(j);
  npu_json_key(j, "kind");
  npu_json_string(j, op_bwd_kind_name(b->kind));
  npu_json_key(j, "rule");
  npu_json_string(j, b->rule ? b->rule : "");
  npu_json_key(j, "reason");
  if (b->reason) npu_json_string(j, b->reason); else npu_json_null(j);
  npu_json_object_end(j);
  npu_json_object_end(j);
}

static int list(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  bool json = false;
  int rc = take_loads(&argc, argv, diag);
  if (rc) return rc;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = true;
    else
      return cli_bad_arg(diag, "kernel list", argv[i]);
  }
  size_t n;
  const struct op_desc *const *ops = op_all(&n);
  if (!json) {
    for (size_t i = 0; i < n; i++) describe(ops[i], out);
    return 0;
  }
  struct npu_json j;
  npu_json_init(&j, out);
  npu_json_array_begin(&j);
  for (size_t i = 0; i < n; i++) describe_json(ops[i], &j);
  npu_json_array_end(&j);
  npu_json_finish(&j);
  return 0;
}

/* Operator name, or NULL with diag saying what is close. */
static const struct op_desc *find_op(const char *name, struct npu_diag *diag)
{
  const struct op_desc *d = op_find(name);
  if (d) return d;
  size_t n;
  const char **names = op_names(&n);
  const char *s = npu_suggest(name, names, n);
  if (s)
    npu_diag_set(diag, "command line", 0, NULL, "unknown operator '%s'; did you mean '%s'?", name, s);
  else
    npu_diag_set(diag, "command line", 0, NULL, "unknown operator '%s' (see 'npusim kernel list')", name);
  free(names);
  return NULL;
}

static int run_op(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const struct op_desc *d = find_op(argv[1], diag);
  if (!d) return NPU_EINVAL;
  const char *arch = "ascend-910b2", *trace_path = NULL;
  bool json = false;
  struct op_run_opts opts = {.fidelity = CORE_FIDELITY_EVENT, .seed = 1};
  struct cli_sets sets = {0};
  char **kv = npu_xcalloc((size_t)argc, sizeof *kv);
  int nkv = 0, rc = 0;
  for (int i = 2; i < argc && rc == 0; i++) {
    int took = cli_take_set(argc, argv, &i, &sets, diag);
    if (took < 0) rc = NPU_EINVAL;
    if (took) continue;
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      rc = cli_bad_arg(diag, "kernel", a);
      break;
    }
    char name[128];
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, a + 2, len);
    name[len] = '\0';
    for (char *p = name; *p; p++)
      if (*p == '-') *p = '_';
    const char *value = eq ? eq + 1 : NULL;
    bool flag = !strcmp(name, "json") || !strcmp(name, "functional");
    int pi = op_param_index(d, name);
    bool bool_param = pi >= 0 && d->params[pi].type == OP_P_BOOL;
    if (!value && !flag && !(bool_param && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)))) {
      if (i + 1 >= argc) {
        rc = npu_diag_set(diag, "command line", 0, NULL, "--%s needs a value", name);
        break;
      }
      value = argv[++i];
    }
    if (!strcmp(name, "json")) json = true;
    else if (!strcmp(name, "functional")) opts.functional = true;
    else if (!strcmp(name, "arch")) arch = value;
    else if (!strcmp(name, "trace")) trace_path = value;
    else if (!strcmp(name, "seed")) {
      char *end;
      opts.seed = strtoull(value, &end, 10);
      if (*end || !value[0] || opts.seed == 0) rc = npu_diag_set(diag, "command line", 0, "--seed", "expected a positive whole number, got '%s'", value);
    } else if (!strcmp(name, "fidelity")) {
      if (!strcmp(value, "event")) opts.fidelity = CORE_FIDELITY_EVENT;
      else if (!strcmp(value, "analytic")) opts.fidelity = CORE_FIDELITY_ANALYTIC;
      else rc = npu_diag_set(diag, "command line", 0, "--fidelity", "expected event or analytic, got '%s'", value);
    } else {
      size_t n = strlen(name) + (value ? strlen(value) : 4) + 2;
      kv[nkv] = npu_xmalloc(n);
      snprintf(kv[nkv++], n, "%s=%s", name, value ? value : "true");
    }
  }
  struct op_args args;
  struct npu_cfg *cfg = NULL;
  struct arch_system sys;
  struct npu_trace tr = {0};
  if (rc == 0) rc = op_args_parse(d, &args, (const char *const *)kv, nkv, diag);
  if (rc == 0) rc = cli_load_system(&cfg, &sys, arch, &sets, diag);
  if (rc == 0 && trace_path && opts.fidelity != CORE_FIDELITY_EVENT)
    rc = npu_diag_set(diag, "command line", 0, "--trace", "a trace needs --fidelity event");
  if (rc == 0) {
    if (trace_path) {
      tr.limit = 4000000;
      opts.trace = &tr;
    }
    struct op_result res;
    rc = op_run(d, &args, &sys.chip, &opts, &res, diag);
    if (rc == 0) {
      char text[1024];
      op_args_format(d, &args, text, sizeof text);
      const char *fid = opts.fidelity == CORE_FIDELITY_EVENT ? "event" : "analytic";
      if (trace_path) {
        struct npu_buf tb = {0};
        rpt_chrome_write(&tr, &tb);
        rc = cli_write_file(trace_path, &tb, "--trace", diag);
        npu_buf_release(&tb);
      }
      if (rc == 0) {
        if (json) mc_kernel_json(d, text, &sys, fid, opts.seed, &res, out);
        else mc_kernel_text(d, text, &sys, fid, &res, out);
        if (res.checked && !res.passed) {
          npu_diag_set(diag, NULL, 0, d->name, "functional check failed: %s", res.check_summary);
          rc = NPU_EINTERNAL;
        }
      }
    }
  }
  npu_trace_release(&tr);
  npu_cfg_destroy(cfg);
  for (int i = 0; i < nkv; i++) free(kv[i]);
  free(kv);
  free(sets.items);
  return rc;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc < 2)
    return npu_diag_set(diag, "command line", 0, NULL, "'kernel' needs an operator or 'list' (see 'npusim help kernel')");
  if (!strcmp(argv[1], "list")) return list(argc, argv, out, diag);
  int rc = take_loads(&argc, argv, diag);
  if (rc) return rc;
  return run_op(argc, argv, out, diag);
}

/* `npusim kernel OP --help`: the operator's parameters (after loading what --load names); the
 * command's usage otherwise. */
static int help(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  int rc = take_loads(&argc, argv, diag);
  if (rc) return rc;
  if (argc < 2 || !strcmp(argv[1], "list") || !strncmp(argv[1], "-", 1)) {
    npu_buf_printf(out, "%s", usage);
    return 0;
  }
  const struct op_desc *d = find_op(argv[1], diag);
  if (!d) return NPU_EINVAL;
  describe(d, out);
  npu_buf_printf(out, "\nrun: npusim kernel %s --PARAM VALUE... [--arch PRESET] [--fidelity event|analytic] "
                 "[--functional] (options: 'npusim help kernel')\n", d->name);
  return 0;
}

const struct npu_cmd npu_cmd_kernel = {"kernel", "run an operator kernel on the chip model", usage, run, help};
