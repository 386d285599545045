/*
 * compare_ops.c - `npusim compare` of a measured operator profile with a simulated step:
 * msprof's op_statistic (per operator type on an Ascend device: count, total, average time)
 * against npusim's operators.csv (per operator of a stage, one step; `npusim run -o DIR`).
 *
 * msprof names CANN operator types (MatMulV2, FlashAttentionScoreGrad, RmsNorm, ...); npusim
 * names its own operators (gemm, flash_attention, rms_norm, ...). The table below says which
 * types are which operator, forward and backward together, as torch_npu and MindSpeed run
 * them. Per npusim operator the command prints the calls and time per step of each side (the
 * profile's totals divided by --steps, the steps it covered) and their ratio; the types the
 * table does not know are listed with their time, as the part of the profile npusim has no
 * operator for. Communication (HCCL) tasks are not in op_statistic and not compared here.
 *
 * A PyTorch profiler trace (Kineto's JSON) compares by category instead: its GPU kernels are
 * classed by name (NCCL kernels as communication; flash / fmha / attention kernels as attention;
 * cuBLAS, CUTLASS, nvjet and other GEMM kernels as gemm; Adam and multi-tensor-apply kernels as
 * optimizer; the rest as vector) and summed, memory copies and sets apart, against the run's
 * operators.csv summed by category (its TP, CP, EP, DP and PP collectives as communication).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/compare.h"
#include "common/err.h"
#include "report/kineto.h"
#include "sweep/table.h"

/* CANN operator types of training and inference on torch_npu, by npusim operator. */
static const struct {
  const char *type, *op;
} cann_ops[] = {
    {"MatMul", "gemm"},
    {"MatMulV2", "gemm"},
    {"MatMulV3", "gemm"},
    {"BatchMatMul", "gemm"},
    {"BatchMatMulV2", "gemm"},
    {"BatchMatMulV3", "gemm"},
    {"QuantBatchMatmulV3", "gemm"},
    {"WeightQuantBatchMatmulV2", "gemm"},
    {"GroupedMatmul", "grouped_gemm"},
    {"FlashAttentionScore", "flash_attention"},
    {"FlashAttentionScoreGrad", "flash_attention"},
    {"PromptFlashAttention", "flash_attention"},
    {"IncreFlashAttention", "paged_attention"},
    {"PagedAttention", "paged_attention"},
    {"RmsNorm", "rms_norm"},
    {"RmsNormGrad", "rms_norm"},
    {"AddRmsNorm", "rms_norm"},
    {"LayerNorm", "layer_norm"},
    {"LayerNormV3", "layer_norm"},
    {"LayerNormV4", "layer_norm"},
    {"LayerNormGrad", "layer_norm"},
    {"LayerNormGradV3", "layer_norm"},
    {"LayerNormBetaGammaBackpropV2", "layer_norm"},
    {"SwiGlu", "swiglu"},
    {"SwiGluGrad", "swiglu"},
    {"RotaryMul", "rope"},
    {"RotaryMulGrad", "rope"},
    {"RotaryPositionEmbedding", "rope"},
    {"RotaryPositionEmbeddingGrad", "rope"},
    {"ApplyRotaryPosEmb", "rope"},
    {"ApplyAdamW", "adamw"},
    {"ApplyAdamWV2", "adamw"},
    {"ApplyAdamWD", "adamw"},
    {"SoftmaxCrossEntropyWithLogits", "cross_entropy"},
    {"MoeGatingTopKSoftmax", "moe_gating"},
    {"MoeGatingTopK", "moe_gating"},
    {"DynamicQuant", "quantize"},
    {"AscendQuantV2", "quantize"},
};
#define NCANN (sizeof cann_ops / sizeof cann_ops[0])

const char *cli_cann_op(const char *type)
{
  for (size_t i = 0; i < NCANN; i++)
    if (!strcmp(cann_ops[i].type, type)) return cann_ops[i].op;
  return NULL;
}

bool cli_is_op_statistic(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[4096];
  bool yes = fgets(line, sizeof line, f) && strstr(line, "OP Type") && strstr(line, "Total Time(us)");
  fclose(f);
  return yes;
}

/* npusim's side: DIR/operators.csv or the file. */
static void sim_path(const char *arg, char *out, size_t n)
{
  struct stat st;
  if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) snprintf(out, n, "%s/operators.csv", arg);
  else snprintf(out, n, "%s", arg);
}

static int need_col(const struct sw_table *t, const char *name, struct npu_diag *diag)
{
  int c = sw_table_col(t, name);
  if (c < 0) npu_diag_set(diag, t->path, 1, NULL, "has no column '%s'", name);
  return c;
}

static bool num(const char *s, double *v)
{
  char *end;
  *v = strtod(s, &end);
  return end != s && !*end && isfinite(*v) && *v >= 0;
}

struct opsum {
  char op[80];
  double calls_a, time_a, calls_b, time_b; /* per step */
};

/* The rows of a comparison, by operator or category, in the order first seen. */
struct sums {
  struct opsum *v;
  int n, cap;
};

static struct opsum *find(struct sums *s, const char *op)
{
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->v[i].op, op)) return &s->v[i];
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->v = npu_xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
  }
  struct opsum *o = &s->v[s->n++];
  memset(o, 0, sizeof *o);
  snprintf(o->op, sizeof o->op, "%s", op);
  return o;
}

/* npusim's category of an operators.csv row, communication for every collective's. */
static const char *sim_category(const char *category)
{
  size_t n = strlen(category);
  return n > 5 && !strcmp(category + n - 5, "_comm") ? "communication" : category;
}

/*
 * B's side: the operators of `stage` in the operators.csv at path (or its directory), summed by
 * operator or (by_category) by category into s; their time into *total. 0 or an error.
 */
static int add_sim(struct sums *s, const char *arg, int stage, bool by_category, double *total, char *path,
                   size_t pathlen, struct npu_diag *diag)
{
  sim_path(arg, path, pathlen);
  struct sw_table b = {0};
  int rc = sw_table_read(path, &b, diag);
  int nc = -1, sc = -1, cc = -1, tc = -1;
  if (!rc && ((nc = need_col(&b, by_category ? "category" : "op", diag)) < 0 ||
              (sc = need_col(&b, "stage", diag)) < 0 || (cc = need_col(&b, "calls", diag)) < 0 ||
              (tc = need_col(&b, "total_s", diag)) < 0))
    rc = NPU_EINVAL;
  int rows = 0;
  for (int i = 0; !rc && i < b.nrows; i++) {
    double st, cnt, t;
    if (!num(b.rows[i][sc], &st) || !num(b.rows[i][cc], &cnt) || !num(b.rows[i][tc], &t)) {
      rc = npu_diag_set(diag, path, i + 2, NULL, "stage, calls and total_s must be numbers >= 0");
      break;
    }
    if ((int)st != stage) continue;
    rows++;
    struct opsum *o = find(s, by_category ? sim_category(b.rows[i][nc]) : b.rows[i][nc]);
    o->calls_b += cnt;
    o->time_b += t;
    *total += t;
  }
  if (!rc && !rows) rc = npu_diag_set(diag, path, 0, "--stage", "has no operator of stage %d", stage);
  sw_table_free(&b);
  return rc;
}

bool cli_tally_add(struct cli_tally *t, const char *label, double key, double a, double b, const char *unit)
{
  bool out;
  if (a > 0) {
    double rel = b / a - 1;
    t->matched++;
    t->sum += rel;
    t->sum_abs += fabs(rel);
    if (t->matched == 1 || fabs(rel) > t->worst) {
      t->worst = fabs(rel);
      t->worst_at = key;
    }
    out = t->tol >= 0 && fabs(rel) * 100 > t->tol;
  } else {
    out = t->tol >= 0 && b > 0;
  }
  if (out && t->beyond++ < 6)
    npu_buf_printf(&t->bad, "%s%s %.4g -> %.4g %s", t->bad.len ? "; " : "", label, a, b, unit);
  return out;
}

int cli_tally_finish(struct cli_tally *t, const char *what, const char *many, struct npu_diag *diag)
{
  int rc = 0;
  if (t->beyond)
    rc = (npu_diag_set(diag, NULL, 0, "--tolerance", "%d %s beyond %g%%: %s%s", t->beyond, t->beyond == 1 ? what : many,
                       t->tol, npu_buf_str(&t->bad), t->beyond > 6 ? "; ..." : ""),
          NPU_EINTERNAL);
  npu_buf_release(&t->bad);
  return rc;
}

/*
 * The rows of a profile comparison (what: "operator" or "category"), then the mean difference
 * over the rows both sides have; with tol >= 0 a row further than tol percent fails.
 */
static int print_sums(const struct opsum *v, int n, const char *what, const char *a_count, double tol,
                      struct npu_buf *out, struct npu_diag *diag)
{
  /* what, in the plural: operators, categories */
  char many[64];
  size_t len = strlen(what);
  if (len && what[len - 1] == 'y') snprintf(many, sizeof many, "%.*sies", (int)(len - 1), what);
  else snprintf(many, sizeof many, "%ss", what);
  char head[64];
  snprintf(head, sizeof head, "%s (per step)", what);
  npu_buf_printf(out, "  %-22s %10s %10s %12s %12s %10s\n", head, a_count, "B calls", "A time(ms)", "B time(ms)",
                 "B / A");
  struct cli_tally t = {.tol = tol};
  for (int i = 0; i < n; i++) {
    const struct opsum *s = &v[i];
    char ratio[32] = "-";
    bool both = s->time_a > 0 && s->calls_b > 0, out_of_tol = false;
    if (both) {
      snprintf(ratio, sizeof ratio, "%.4f", s->time_b / s->time_a);
      out_of_tol = cli_tally_add(&t, s->op, 0, 1e3 * s->time_a, 1e3 * s->time_b, "ms");
    }
    npu_buf_printf(out, "  %-22s %10.1f %10.0f %12.3f %12.3f %10s%s\n", s->op, s->calls_a, s->calls_b, 1e3 * s->time_a,
                   1e3 * s->time_b, ratio, out_of_tol ? "  beyond tolerance" : "");
  }
  if (t.matched)
    npu_buf_printf(out, "\n%d %s on both sides: mean |B / A - 1| %.2f%%\n", t.matched, t.matched == 1 ? what : many,
                   100 * t.sum_abs / t.matched);
  else
    npu_buf_printf(out, "\nno %s on both sides\n", what);
  return cli_tally_finish(&t, what, many, diag);
}

int cli_compare_op_statistic(const char *measured, const char *simulated, int steps, int stage, double tol,
                             struct npu_buf *out, struct npu_diag *diag)
{
  struct sw_table a = {0};
  struct sums v = {0};
  struct npu_buf unknown = {0};
  double known_a = 0, unknown_a = 0, total_b = 0;
  int ta = -1, ca = -1, ua = -1;
  int rc = sw_table_read(measured, &a, diag);
  if (!rc && ((ta = need_col(&a, "OP Type", diag)) < 0 || (ca = need_col(&a, "Count", diag)) < 0 ||
              (ua = need_col(&a, "Total Time(us)", diag)) < 0))
    rc = NPU_EINVAL;
  for (int i = 0; !rc && i < a.nrows; i++) {
    double cnt, us;
    if (!num(a.rows[i][ca], &cnt) || !num(a.rows[i][ua], &us)) {
      rc = npu_diag_set(diag, a.path, i + 2, NULL, "Count and Total Time(us) must be numbers >= 0");
      break;
    }
    const char *op = cli_cann_op(a.rows[i][ta]);
    if (!op) {
      npu_buf_printf(&unknown, "%s%s %.3f ms", unknown.len ? ", " : "", a.rows[i][ta], us / 1e3 / steps);
      unknown_a += us / 1e6 / steps;
      continue;
    }
    struct opsum *o = find(&v, op);
    o->calls_a += cnt / steps;
    o->time_a += us / 1e6 / steps;
    known_a += us / 1e6 / steps;
  }
  char sp[1100];
  if (!rc) rc = add_sim(&v, simulated, stage, false, &total_b, sp, sizeof sp, diag);
  if (!rc) {
    npu_buf_printf(out, "A  %s (msprof op_statistic, %d step%s)\nB  %s (stage %d, one step)\n\n", measured, steps,
                   steps == 1 ? "" : "s", sp, stage);
    rc = print_sums(v.v, v.n, "operator", "A calls", tol, out, diag);
    npu_buf_printf(out, "per step: A %.3f ms in the operators named above, %.3f ms in types npusim has no operator "
                        "for; B %.3f ms\n",
                   1e3 * known_a, 1e3 * unknown_a, 1e3 * total_b);
    if (unknown.len) npu_buf_printf(out, "types npusim has no operator for (A, per step): %s\n", npu_buf_str(&unknown));
  }
  npu_buf_release(&unknown);
  free(v.v);
  sw_table_free(&a);
  return rc;
}

/* The category npusim costs a GPU kernel of the trace as (see the file comment), or NULL when
 * the event is not device activity. */
const char *cli_kernel_category(const char *cat, const char *name)
{
  if (!strcmp(cat, "gpu_memcpy") || !strcmp(cat, "gpu_memset")) return "memcpy";
  if (strcmp(cat, "kernel")) return NULL;
  char low[256];
  size_t i = 0;
  for (; name[i] && i + 1 < sizeof low; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
  low[i] = '\0';
  static const struct {
    const char *cat, *words[8];
  } rules[] = {
      {"communication", {"nccl", NULL}},
      {"attention", {"flash", "fmha", "attention", "attn", NULL}},
      {"gemm", {"gemm", "cutlass", "xmma", "cublas", "nvjet", "matmul", NULL}},
      {"optimizer", {"adam", "multi_tensor_apply", NULL}},
  };
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
    for (int w = 0; rules[r].words[w]; w++)
      if (strstr(low, rules[r].words[w])) return rules[r].cat;
  return "vector";
}

struct ksum {
  struct sums s;
  double steps;
};

static void add_kernel(const struct kineto_event *ev, void *ctx)
{
  struct ksum *k = ctx;
  const char *c = cli_kernel_category(ev->cat, ev->name);
  if (!c) return;
  struct opsum *o = find(&k->s, c);
  o->calls_a += 1 / k->steps;
  o->time_a += ev->dur_us / 1e6 / k->steps;
}

int cli_compare_kineto(const char *measured, const char *simulated, int steps, int stage, double tol,
                       struct npu_buf *out, struct npu_diag *diag)
{
  struct ksum k = {.steps = steps};
  double total_b = 0;
  char sp[1100];
  int rc = kineto_read(measured, add_kernel, &k, diag);
  if (!rc) rc = add_sim(&k.s, simulated, stage, true, &total_b, sp, sizeof sp, diag);
  if (!rc) {
    npu_buf_printf(out, "A  %s (PyTorch profiler trace, %d step%s)\nB  %s (stage %d, one step)\n\n", measured, steps,
                   steps == 1 ? "" : "s", sp, stage);
    rc = print_sums(k.s.v, k.s.n, "category", "A kernels", tol, out, diag);
  }
  free(k.s.v);
  return rc;
}
