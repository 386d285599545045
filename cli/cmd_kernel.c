/*
 * cmd_kernel.c - `npusim kernel`: list the operators, or run one on a chip (timing, and
 * optionally functional with a reference check) and print time, achieved rates, pipe ratios
 * and the bottleneck.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/cfg.h"
#include "common/err.h"
#include "common/json.h"
#include "common/units.h"
#include "formats/formats.h"
#include "micro/micro.h"
#include "micro/msprof.h"
#include "ops/op.h"
#include "ops/parity.h"
#include "ops/plugin.h"
#include "report/trace_file.h"

static const char usage[] =
    "usage: npusim kernel list [--load FILE]... [--json]\n"
    "       npusim kernel OP --help [--load FILE]...\n"
    "       npusim kernel OP [--PARAM VALUE]... [--arch PRESET|FILE] [--set KEY=VALUE]...\n"
    "                        [--fidelity event|analytic] [--functional] [--seed N] [--json]\n"
    "                        [--trace FILE] [--load FILE]... [--dump DIR] [--golden TENSOR=FILE]\n"
    "       npusim kernel OP [--PARAM VALUE]... --parity [--arch ...] [--seed N] [--json]\n"
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
    "  --trace FILE       write a Chrome trace (Perfetto) of every instruction (event fidelity),\n"
    "                     streamed to disk, never cut; gzip-compressed when FILE ends in .gz\n"
    "  --progress         a progress line on stderr while an event-fidelity kernel runs (blocks\n"
    "                     issued); the default when stderr is a terminal; --no-progress: off\n"
    "  --msprof DIR       write what the msprof op simulator writes (event fidelity): per-core\n"
    "                     instruction tables and pipeline traces, PipeUtilization.csv,\n"
    "                     OpBasicInfo.csv (docs/KERNELS.md); DIR new or empty\n"
    "  --load FILE        load the operators of a kernel plugin (a shared object built against\n"
    "                     `pkg-config --cflags npusim-kernel`; see docs/KERNELS.md), repeatable\n"
    "  --dump DIR         functional: write every tensor as the kernels left it, DIR/NAME.bin (raw\n"
    "                     elements of its type) and DIR/tensors.txt (name, dtype, elements)\n"
    "  --golden T=FILE    functional: compare tensor T with FILE (raw elements of T's type, as\n"
    "                     --dump writes them): wrong / total beyond --atol A + --rtol R |golden|\n"
    "                     (default 1e-3 each); any wrong element exits 1\n"
    "  --parity           run the operator's parity cases (batch size, tiling, split-K, cores; see\n"
    "                     docs/KERNELS.md) functionally and report which change the output bits\n"
    "\n"
    "Exit status: 0 done, 1 a functional or golden check failed (or an I/O error), 2 bad input.\n";

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

/* --parity, --dump, --golden and their tolerances. */
struct extras {
  bool parity, done;
  const char *dump, *golden;   /* DIR; TENSOR=FILE */
  double rtol, atol;
  char tensor[64];             /* --golden's tensor */
  void *golden_data;           /* --golden's file */
  size_t golden_bytes;
  size_t traced;               /* --trace: events written */
  const char *msprof;          /* --msprof DIR */
  int progress;                /* --progress 1, --no-progress 0, else -1: when stderr is a terminal */
};

/* Before anything runs: --dump's directory exists (or is made), --golden's file is read. */
static int extras_prepare(struct extras *x, struct npu_diag *diag)
{
  if (x->dump && mkdir(x->dump, 0777) != 0 && errno != EEXIST)
    return npu_diag_set(diag, x->dump, 0, "--dump", "cannot create the directory: %s", strerror(errno)), NPU_EIO;
  if (!x->golden) return 0;
  const char *eq = strchr(x->golden, '=');
  if (!eq || eq == x->golden || !eq[1] || (size_t)(eq - x->golden) >= sizeof x->tensor)
    return npu_diag_set(diag, "command line", 0, "--golden", "expected TENSOR=FILE, got '%s'", x->golden);
  snprintf(x->tensor, sizeof x->tensor, "%.*s", (int)(eq - x->golden), x->golden);
  FILE *f = fopen(eq + 1, "rb");
  if (!f) return npu_diag_set(diag, eq + 1, 0, "--golden", "cannot open: %s", strerror(errno));
  struct npu_buf b = {0};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) npu_buf_append(&b, chunk, n);
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    npu_buf_release(&b);
    return npu_diag_set(diag, eq + 1, 0, "--golden", "cannot read"), NPU_EIO;
  }
  x->golden_bytes = b.len;
  x->golden_data = npu_xmalloc(b.len ? b.len : 1);
  memcpy(x->golden_data, npu_buf_str(&b), b.len);
  npu_buf_release(&b);
  return 0;
}

/* DIR/NAME.bin for every tensor (as the kernels left it) and DIR/tensors.txt. */
static int extras_dump(const struct extras *x, const struct op_capture *cap, struct npu_diag *diag)
{
  struct npu_buf list = {0};
  int rc = 0;
  for (int i = 0; i < cap->n && !rc; i++) {
    const struct op_captured *t = &cap->t[i];
    if (t->scratch) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", x->dump, t->name);
    struct npu_buf b = {0};
    npu_buf_append(&b, t->after, fmt_bytes(t->dtype, t->count));
    rc = cli_write_file(path, &b, "--dump", diag);
    npu_buf_release(&b);
    npu_buf_printf(&list, "%s %s %llu\n", t->name, npu_dtype_name(t->dtype), (unsigned long long)t->count);
  }
  if (!rc) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tensors.txt", x->dump);
    rc = cli_write_file(path, &list, "--dump", diag);
  }
  npu_buf_release(&list);
  return rc;
}

/* Compare --golden's tensor: wrong / total beyond atol + rtol |golden|, as the CANN simulator's
 * comparison reports; any wrong element is a failed check (exit 1). */
static int extras_golden(const struct extras *x, const struct op_capture *cap, struct npu_buf *out,
                         struct npu_diag *diag)
{
  const struct op_captured *t = NULL;
  struct npu_buf names = {0};
  for (int i = 0; i < cap->n; i++) {
    if (!strcmp(cap->t[i].name, x->tensor)) t = &cap->t[i];
    npu_buf_printf(&names, "%s%s", i ? ", " : "", cap->t[i].name);
  }
  if (!t) {
    npu_diag_set(diag, "command line", 0, "--golden", "the operator has no tensor '%s' (it has: %s)", x->tensor,
                 npu_buf_str(&names));
    npu_buf_release(&names);
    return NPU_EINVAL;
  }
  npu_buf_release(&names);
  size_t want = fmt_bytes(t->dtype, t->count);
  if (x->golden_bytes != want)
    return npu_diag_set(diag, "command line", 0, "--golden", "%s holds %llu %s elements (%zu bytes); the file has %zu bytes",
                        t->name, (unsigned long long)t->count, npu_dtype_name(t->dtype), want, x->golden_bytes);
  uint64_t wrong = 0, worst_i = 0;
  double worst = 0;
  for (uint64_t i = 0; i < t->count; i++) {
    double got = fmt_decode(t->dtype, t->after, i), ref = fmt_decode(t->dtype, x->golden_data, i);
    double err = fabs(got - ref), tol = x->atol + x->rtol * fabs(ref);
    bool bad = isnan(got) != isnan(ref) || (!isnan(ref) && err > tol);
    if (bad) wrong++;
    if (bad && (isnan(err) || err > worst || wrong == 1)) {
      worst = err;
      worst_i = i;
    }
  }
  if (out)
    npu_buf_printf(out, "  golden            %s: %llu of %llu wrong (%.4g%%) beyond atol %g + rtol %g x |golden|%s",
                   t->name, (unsigned long long)wrong, (unsigned long long)t->count,
                   t->count ? 100.0 * (double)wrong / (double)t->count : 0.0, x->atol, x->rtol, wrong ? "" : "\n");
  if (out && wrong)
    npu_buf_printf(out, "; worst %s[%llu]: %.9g vs golden %.9g\n", t->name, (unsigned long long)worst_i,
                   fmt_decode(t->dtype, t->after, worst_i), fmt_decode(t->dtype, x->golden_data, worst_i));
  if (wrong)
    return npu_diag_set(diag, NULL, 0, "--golden", "%s: %llu of %llu elements differ from the golden file beyond the "
                        "tolerance", t->name, (unsigned long long)wrong, (unsigned long long)t->count), NPU_EINTERNAL;
  return 0;
}

/* Operator name, or NULL with diag saying what is close. */
static const struct op_desc *find_op(const char *name, struct npu_diag *diag)
{
  const struct op_desc *d = op_find(name);
  if (d) return d;
  const char *s = op_suggest(name);
  if (s)
    npu_diag_set(diag, "command line", 0, NULL, "unknown operator '%s'; did you mean '%s'?", name, s);
  else
    npu_diag_set(diag, "command line", 0, NULL, "unknown operator '%s' (see 'npusim kernel list')", name);
  return NULL;
}

static int run_op(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const struct op_desc *d = find_op(argv[1], diag);
  if (!d) return NPU_EINVAL;
  const char *arch = "ascend-910b2", *trace_path = NULL;
  bool json = false;
  struct extras x = {.rtol = 1e-3, .atol = 1e-3, .progress = -1};
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
    bool flag = !strcmp(name, "json") || !strcmp(name, "functional") || !strcmp(name, "parity") ||
                !strcmp(name, "progress") || !strcmp(name, "no_progress");
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
    else if (!strcmp(name, "parity")) x.parity = true;
    else if (!strcmp(name, "progress") || !strcmp(name, "no_progress")) x.progress = name[0] == 'p';
    else if (!strcmp(name, "dump")) x.dump = value;
    else if (!strcmp(name, "golden")) x.golden = value;
    else if (!strcmp(name, "rtol") || !strcmp(name, "atol")) {
      char *end;
      double v = strtod(value, &end);
      if (end == value || *end || !(v >= 0) || !isfinite(v))
        rc = npu_diag_set(diag, "command line", 0, name[0] == 'r' ? "--rtol" : "--atol",
                          "expected a number >= 0, got '%s'", value);
      *(name[0] == 'r' ? &x.rtol : &x.atol) = v;
    }
    else if (!strcmp(name, "arch")) arch = value;
    else if (!strcmp(name, "trace")) trace_path = value;
    else if (!strcmp(name, "msprof")) x.msprof = value;
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
  if (rc == 0 && sys.has_node) opts.node = &sys.node;
  if (rc == 0 && (trace_path || x.msprof) && opts.fidelity != CORE_FIDELITY_EVENT)
    rc = npu_diag_set(diag, "command line", 0, trace_path ? "--trace" : "--msprof", "an instruction timeline needs --fidelity event");
  if (rc == 0 && d->ranks && (x.parity || x.msprof)) /* an MC2 operator: one launch on a server's devices */
    rc = npu_diag_set(diag, "command line", 0, x.parity ? "--parity" : "--msprof", "%s runs on several devices at once; %s",
                      d->name, x.parity ? "the parity cases run one device's kernels"
                                        : "msprof's layout is one device's cores (--trace draws every device)");
  if (rc == 0 && x.parity && (trace_path || x.dump || x.golden || x.msprof))
    rc = npu_diag_set(diag, "command line", 0, "--parity", "runs cases of its own: not with --trace, --msprof, --dump or --golden");
  if (rc == 0 && x.parity) {
    struct op_parity p;
    rc = op_parity_run(d, &args, &sys.chip, opts.seed, &p, diag);
    if (rc == 0) (json ? mc_parity_json : mc_parity_text)(d, &p, &sys, opts.seed, out);
    op_parity_release(&p);
    x.done = true;
  }
  struct op_capture cap;
  memset(&cap, 0, sizeof cap);
  if (rc == 0 && !x.done && (x.dump || x.golden)) {
    opts.functional = true;
    opts.capture = &cap;
    rc = extras_prepare(&x, diag); /* paths checked before anything runs */
  }
  struct rpt_trace_file *tf = NULL;
  if (rc == 0 && !x.done && trace_path) { /* opened first: an unwritable path fails before the run */
    rc = rpt_trace_file_open(&tf, trace_path, "--trace", diag);
    if (rc == 0) {
      rpt_trace_file_attach(tf, &tr);
      opts.trace = &tr;
    }
  }
  struct mc_msprof *mp = NULL;
  if (rc == 0 && !x.done && x.msprof) {
    rc = mc_msprof_open(&mp, x.msprof, &sys.chip, diag);
    if (rc == 0) opts.observe = mc_msprof_observer(mp);
  }
  if (rc == 0 && !x.done) {
    struct op_result res;
    struct cli_progress pg;
    cli_progress_init(&pg, x.progress);
    opts.progress = cli_progress_sink(&pg);
    rc = op_run(d, &args, &sys.chip, &opts, &res, diag);
    cli_progress_end(&pg);
    if (rc == 0) {
      char text[1024];
      op_args_format(d, &args, text, sizeof text);
      const char *fid = opts.fidelity == CORE_FIDELITY_EVENT ? "event" : "analytic";
      if (tf) {
        size_t events = npu_trace_events(&tr);
        rc = rpt_trace_file_close(tf, &tr, diag);
        tf = NULL;
        if (rc == 0) x.traced = events;
      }
      if (rc == 0 && mp) {
        rc = mc_msprof_close(mp, d->name, diag);
        mp = NULL;
      }
      if (rc == 0) {
        if (json) mc_kernel_json(d, text, &sys, fid, opts.seed, &res, out);
        else mc_kernel_text(d, text, &sys, fid, &res, out);
        if (!json && trace_path) npu_buf_printf(out, "trace          %s: every instruction, %zu events\n", trace_path, x.traced);
        if (!json && x.msprof) npu_buf_printf(out, "msprof         %s: simulator/core*/, PipeUtilization.csv, OpBasicInfo.csv\n", x.msprof);
        if (x.dump) rc = extras_dump(&x, &cap, diag);
        if (!rc && x.golden) rc = extras_golden(&x, &cap, json ? NULL : out, diag);
        if (res.checked && !res.passed) {
          npu_diag_set(diag, NULL, 0, d->name, "functional check failed: %s", res.check_summary);
          rc = NPU_EINTERNAL;
        }
      }
    }
  }
  rpt_trace_file_abort(tf);
  mc_msprof_abort(mp);
  npu_trace_release(&tr);
  op_capture_release(&cap);
  free(x.golden_data);
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
