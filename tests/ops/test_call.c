/*
 * test_call.c - typed operator calls: names, types and values checked when the call is built,
 * with located errors; the label (given arguments in table order) and the cache key (all of
 * them) equal to those of the same call as text; and every operator's backward rule builds
 * valid calls (real kernels, or proxies with their reason).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/diag.h"
#include "common/err.h"
#include "ops/op.h"

TestSuite(call, .timeout = 30);

static void label_is(const struct op_call *c, const char *want)
{
  char got[512];
  op_call_label(c, got, sizeof got);
  cr_assert_str_eq(got, want);
}

/* The check's message, "FILE:LINE: KEY: MESSAGE". */
static void error_is(const struct op_call *c, const char *want)
{
  struct npu_diag d;
  char got[1024];
  npu_diag_clear(&d);
  cr_assert_neq(op_call_check(c, &d), 0, "no error, want %s", want);
  cr_assert(!op_call_ok(c));
  npu_diag_format(&d, got, sizeof got);
  cr_assert_str_eq(got, want);
}

Test(call, label_lists_the_given_arguments_in_table_order)
{
  struct op_call c;
  op_call_init(&c, "gemm");
  op_call_bool(&c, "trans_b", true);
  op_call_dtype(&c, "dtype", NPU_DT_BF16);
  op_call_dim(&c, "k", 4096);
  op_call_dim(&c, "n", 1024);
  op_call_dim(&c, "m", 8192);
  cr_assert(op_call_ok(&c));
  label_is(&c, "gemm m=8192 n=1024 k=4096 dtype=bf16 trans_b=true");
  struct op_call d;
  op_call_init(&d, "dropout");
  op_call_dim(&d, "rows", 256);
  op_call_dim(&d, "cols", 12288);
  op_call_real(&d, "p", 0.1);
  label_is(&d, "dropout rows=256 cols=12288 p=0.1");
}

/* The typed call has exactly the arguments the text "name=value ..." parses to: the cost cache's
 * key (op_args_format of all of them) is unchanged. */
Test(call, arguments_equal_the_parsed_text)
{
  struct op_call c;
  op_call_init(&c, "moe_gating");
  op_call_dim(&c, "tokens", 4096);
  op_call_dim(&c, "experts", 256);
  op_call_dim(&c, "topk", 8);
  op_call_choice(&c, "score", "sigmoid");
  op_call_dim(&c, "topk_groups", 0);
  op_call_bool(&c, "norm", true);
  cr_assert(op_call_ok(&c));
  const char *kv[] = {"tokens=4096", "experts=256", "topk=8", "score=sigmoid", "topk_groups=0", "norm=true"};
  struct op_args a;
  struct npu_diag d;
  cr_assert_eq(op_args_parse(c.desc, &a, kv, 6, &d), 0);
  char want[1024], got[1024];
  op_args_format(c.desc, &a, want, sizeof want);
  op_args_format(c.desc, &c.args, got, sizeof got);
  cr_assert_str_eq(got, want);
  char text[512];
  op_call_args_text(&c, text, sizeof text);
  cr_assert_str_eq(text, "tokens=4096 experts=256 topk=8 score=sigmoid topk_groups=0 norm=true");
}

Test(call, a_misspelt_parameter_is_a_located_error)
{
  struct op_call c;
  int line = __LINE__ + 1;
  op_call_init(&c, "gemm");
  op_call_dim(&c, "mm", 4096);
  op_call_dim(&c, "n", 0); /* the first error sticks */
  char want[256];
  snprintf(want, sizeof want, "ops/test_call.c:%d: gemm: 'gemm' has no parameter 'mm'; did you mean 'm'?", line);
  error_is(&c, want);
}

Test(call, an_unknown_operator_is_a_located_error)
{
  struct op_call c;
  int line = __LINE__ + 1;
  op_call_init(&c, "gemn");
  op_call_dim(&c, "m", 1);
  char want[256];
  snprintf(want, sizeof want, "ops/test_call.c:%d: gemn: unknown operator 'gemn'; did you mean 'gemm'?", line);
  error_is(&c, want);
}

Test(call, types_and_values_are_checked)
{
  struct op_call c;
  int line = __LINE__ + 1;
  op_call_init(&c, "gemm");
  op_call_bool(&c, "m", true);
  char want[256];
  snprintf(want, sizeof want, "ops/test_call.c:%d: gemm.m: is not true / false (see 'npusim kernel list')", line);
  error_is(&c, want);

  line = __LINE__ + 1;
  op_call_init(&c, "gemm");
  op_call_dim(&c, "m", 0);
  snprintf(want, sizeof want, "ops/test_call.c:%d: gemm.m: must be at least 1, got 0", line);
  error_is(&c, want);

  line = __LINE__ + 1;
  op_call_init(&c, "flash_attention");
  op_call_choice(&c, "pass", "bwdd");
  snprintf(want, sizeof want, "ops/test_call.c:%d: flash_attention.pass: unknown value 'bwdd'; did you mean 'bwd'?",
           line);
  error_is(&c, want);

  line = __LINE__ + 1;
  op_call_init(&c, "gemm");
  op_call_dim(&c, "m", 64);
  op_call_dim(&c, "n", 64);
  snprintf(want, sizeof want, "ops/test_call.c:%d: gemm.k: required (columns of A, rows of B) but not set", line);
  error_is(&c, want);

  op_call_init(&c, "flash_attention"); /* an INT parameter takes 0 */
  op_call_dim(&c, "heads", 8);
  op_call_dim(&c, "seq", 1024);
  op_call_dim(&c, "kv_heads", 0);
  cr_assert(op_call_ok(&c));
}

/* A call of op with each required parameter set to 256 (or its type's first value). */
static struct op_call full_call(const struct op_desc *d)
{
  struct op_call c;
  op_call_init(&c, d->name);
  for (int i = 0; i < d->nparams; i++) {
    const struct op_param *p = &d->params[i];
    if (p->def) continue;
    switch (p->type) {
    case OP_P_DIM:
    case OP_P_INT: op_call_dim(&c, p->name, 256); break;
    case OP_P_DTYPE: op_call_dtype(&c, p->name, NPU_DT_BF16); break;
    case OP_P_BOOL: op_call_bool(&c, p->name, false); break;
    case OP_P_CHOICE: op_call_choice(&c, p->name, p->choices[0]); break;
    case OP_P_REAL: op_call_real(&c, p->name, 1); break;
    }
  }
  return c;
}

Test(call, every_operator_states_its_backward_and_builds_valid_calls)
{
  size_t n;
  const struct op_desc *const *ops = op_all(&n);
  for (size_t i = 0; i < n; i++) {
    const struct op_bwd *b = &ops[i]->bwd;
    cr_assert(b->rule && b->rule[0], "%s: no backward rule", ops[i]->name);
    cr_assert_eq(b->kind == OP_BWD_PROXY, b->reason != NULL, "%s: a proxy (only) gives its reason", ops[i]->name);
    cr_assert_eq(b->kind == OP_BWD_NONE, b->build == NULL, "%s: build function and kind disagree", ops[i]->name);
    struct op_call fwd = full_call(ops[i]), out[OP_MAX_BWD_CALLS];
    cr_assert(op_call_ok(&fwd), "%s", ops[i]->name);
    enum op_grad g[OP_MAX_BWD_CALLS];
    int nb = op_call_backward(&fwd, out, g);
    cr_assert_eq(nb == 0, b->kind == OP_BWD_NONE, "%s: %d backward calls", ops[i]->name, nb);
    for (int k = 0; k < nb; k++) {
      struct npu_diag d;
      char msg[1024];
      npu_diag_clear(&d);
      int rc = op_call_check(&out[k], &d);
      npu_diag_format(&d, msg, sizeof msg);
      cr_assert_eq(rc, 0, "%s: backward call %d: %s", ops[i]->name, k, msg);
    }
  }
}

Test(call, backward_rules)
{
  struct op_call f, b[OP_MAX_BWD_CALLS];
  enum op_grad g[OP_MAX_BWD_CALLS];
  /* Y = X W^T: dX = dY W, dW = dY^T X */
  op_call_init(&f, "gemm");
  op_call_dim(&f, "m", 4096);
  op_call_dim(&f, "n", 1024);
  op_call_dim(&f, "k", 512);
  op_call_dtype(&f, "dtype", NPU_DT_BF16);
  op_call_bool(&f, "trans_b", true);
  cr_assert_eq(op_call_backward(&f, b, g), 2);
  label_is(&b[0], "gemm m=4096 n=512 k=1024 dtype=bf16");
  label_is(&b[1], "gemm m=1024 n=512 k=4096 dtype=bf16 trans_a=true");
  cr_assert(g[0] == OP_GRAD_INPUT && g[1] == OP_GRAD_WEIGHT);
  /* C = A B, both plain: dA = dC B^T, dB = A^T dC */
  op_call_init(&f, "gemm");
  op_call_dim(&f, "m", 64);
  op_call_dim(&f, "n", 32);
  op_call_dim(&f, "k", 16);
  cr_assert_eq(op_call_backward(&f, b, g), 2);
  label_is(&b[0], "gemm m=64 n=16 k=32 dtype=fp16 trans_b=true");
  label_is(&b[1], "gemm m=16 n=32 k=64 dtype=fp16 trans_a=true");

  op_call_init(&f, "swiglu");
  op_call_dim(&f, "rows", 4096);
  op_call_dim(&f, "ffn", 1408);
  cr_assert_eq(op_call_backward(&f, b, g), 1);
  label_is(&b[0], "swiglu rows=6827 ffn=1408");

  op_call_init(&f, "flash_attention");
  op_call_dim(&f, "heads", 8);
  op_call_dim(&f, "seq", 1024);
  op_call_choice(&f, "pass", "fwd");
  cr_assert_eq(op_call_backward(&f, b, g), 1);
  label_is(&b[0], "flash_attention heads=8 seq=1024 pass=bwd");

  op_call_init(&f, "moe_unpermute");
  op_call_dim(&f, "tokens", 512);
  op_call_dim(&f, "hidden", 1024);
  op_call_bool(&f, "residual", true);
  cr_assert_eq(op_call_backward(&f, b, g), 1);
  label_is(&b[0], "moe_permute tokens=512 hidden=1024");

  op_call_init(&f, "grouped_gemm");
  op_call_dim(&f, "groups", 4);
  op_call_dim(&f, "m", 2048);
  op_call_dim(&f, "n", 1408);
  op_call_dim(&f, "k", 1024);
  cr_assert_eq(op_call_backward(&f, b, g), 2);
  label_is(&b[0], "grouped_gemm groups=4 m=2048 n=1024 k=1408");
  label_is(&b[1], "grouped_gemm groups=4 m=2048 n=1024 k=1408");
  cr_assert(g[0] == OP_GRAD_INPUT && g[1] == OP_GRAD_WEIGHT);

  op_call_init(&f, "adamw");
  op_call_dim(&f, "n", 100);
  cr_assert_eq(op_call_backward(&f, b, g), 0);
}
