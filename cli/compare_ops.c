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
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/compare.h"
#include "common/err.h"
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
  char op[64];
  double calls_a, time_a, calls_b, time_b; /* per step */
};

static struct opsum *find(struct opsum *v, int *n, const char *op)
{
  for (int i = 0; i < *n; i++)
    if (!strcmp(v[i].op, op)) return &v[i];
  memset(&v[*n], 0, sizeof v[*n]);
  snprintf(v[*n].op, sizeof v[*n].op, "%s", op);
  return &v[(*n)++];
}

int cli_compare_op_statistic(const char *measured, const char *simulated, int steps, int stage, double tol,
                             struct npu_buf *out, struct npu_diag *diag)
{
  char sp[1100];
  sim_path(simulated, sp, sizeof sp);
  struct sw_table a = {0}, b = {0};
  int rc = sw_table_read(measured, &a, diag);
  if (!rc) rc = sw_table_read(sp, &b, diag);
  int ta = -1, ca = -1, ua = -1, ob = -1, sb = -1, nb = -1, tb = -1;
  if (!rc && ((ta = need_col(&a, "OP Type", diag)) < 0 || (ca = need_col(&a, "Count", diag)) < 0 ||
              (ua = need_col(&a, "Total Time(us)", diag)) < 0))
    rc = NPU_EINVAL;
  if (!rc && ((ob = need_col(&b, "op", diag)) < 0 || (sb = need_col(&b, "stage", diag)) < 0 ||
              (nb = need_col(&b, "calls", diag)) < 0 || (tb = need_col(&b, "total_s", diag)) < 0))
    rc = NPU_EINVAL;
  int cap = a.nrows + b.nrows + 1, n = 0;
  struct opsum *v = npu_xcalloc((size_t)cap, sizeof *v);
  struct npu_buf unknown = {0};
  double known_a = 0, unknown_a = 0, total_b = 0;
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
    struct opsum *s = find(v, &n, op);
    s->calls_a += cnt / steps;
    s->time_a += us / 1e6 / steps;
    known_a += us / 1e6 / steps;
  }
  int rows_b = 0;
  for (int i = 0; !rc && i < b.nrows; i++) {
    double st, cnt, t;
    if (!num(b.rows[i][sb], &st) || !num(b.rows[i][nb], &cnt) || !num(b.rows[i][tb], &t)) {
      rc = npu_diag_set(diag, b.path, i + 2, NULL, "stage, calls and total_s must be numbers >= 0");
      break;
    }
    if ((int)st != stage) continue;
    rows_b++;
    struct opsum *s = find(v, &n, b.rows[i][ob]);
    s->calls_b += cnt;
    s->time_b += t;
    total_b += t;
  }
  if (!rc && !rows_b) rc = npu_diag_set(diag, b.path, 0, "--stage", "has no operator of stage %d", stage);
  int beyond = 0, matched = 0;
  double sum_abs = 0;
  struct npu_buf bad = {0};
  if (!rc) {
    npu_buf_printf(out, "A  %s (msprof op_statistic, %d step%s)\nB  %s (stage %d, one step)\n\n", measured, steps,
                   steps == 1 ? "" : "s", b.path, stage);
    npu_buf_printf(out, "  %-22s %10s %10s %12s %12s %10s\n", "operator (per step)", "A calls", "B calls", "A time(ms)",
                   "B time(ms)", "B / A");
    for (int i = 0; i < n; i++) {
      const struct opsum *s = &v[i];
      char ratio[32] = "-";
      bool both = s->time_a > 0 && s->calls_b > 0;
      double rel = both ? s->time_b / s->time_a - 1 : 0;
      if (both) {
        snprintf(ratio, sizeof ratio, "%.4f", s->time_b / s->time_a);
        matched++;
        sum_abs += fabs(rel);
      }
      bool out_of_tol = tol >= 0 && both && fabs(rel) * 100 > tol;
      npu_buf_printf(out, "  %-22s %10.0f %10.0f %12.3f %12.3f %10s%s\n", s->op, s->calls_a, s->calls_b,
                     1e3 * s->time_a, 1e3 * s->time_b, ratio, out_of_tol ? "  beyond tolerance" : "");
      if (out_of_tol && beyond++ < 6)
        npu_buf_printf(&bad, "%s%s %.4g -> %.4g ms", bad.len ? "; " : "", s->op, 1e3 * s->time_a, 1e3 * s->time_b);
    }
    npu_buf_printf(out, "\nper step: A %.3f ms in the operators named above, %.3f ms in types npusim has no operator "
                        "for; B %.3f ms\n",
                   1e3 * known_a, 1e3 * unknown_a, 1e3 * total_b);
    if (unknown.len) npu_buf_printf(out, "types npusim has no operator for (A, per step): %s\n", npu_buf_str(&unknown));
    if (matched)
      npu_buf_printf(out, "%d operators on both sides: mean |B / A - 1| %.2f%%\n", matched, 100 * sum_abs / matched);
    if (beyond)
      rc = (npu_diag_set(diag, NULL, 0, "--tolerance", "%d operator%s beyond %g%%: %s%s", beyond, beyond == 1 ? "" : "s",
                         tol, npu_buf_str(&bad), beyond > 6 ? "; ..." : ""),
            NPU_EINTERNAL);
  }
  npu_buf_release(&bad);
  npu_buf_release(&unknown);
  free(v);
  sw_table_free(&a);
  sw_table_free(&b);
  return rc;
}
