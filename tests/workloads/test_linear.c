/*
 * test_linear.c - hybrid linear attention (model.linear: Gated DeltaNet layers among softmax
 * attention ones, Qwen3-Next) and gated attention (model.attn_gate): the layers' kinds and
 * parameters in closed form, the step's calls in each kind's segments (the gated delta rule and
 * its convolution in the linear layers, FlashAttention with its output gate in the others),
 * memory per kind, model FLOPs, and what cannot be costed refused.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "common/err.h"
#include "ops/op.h"
#include "workloads/job.h"
#include "workloads/memory.h"
#include "workloads/program.h"
#include "helpers.h"

#define SCN NPUSIM_SOURCE_DIR "/tests/workloads/data/"

/* Qwen3-Next-80B-A3B (config.json): hidden 2048; linear layers of 32 value heads and 16 query/key
 * heads of 128, a convolution of 4; full attention every 4th layer, 16 query and 2 KV heads of
 * 256 with the output gate and QK norms; 512 experts of 512 and a shared one in every layer. */
Test(linear, the_hybrid_layers_have_their_kinds_and_parameters, .timeout = 30)
{
  const char *sets[] = {"plan.global_batch=16", NULL};
  struct tw w;
  tw_load(&w, "qwen3-next-80b-a3b", 16, sets);
  const struct wl_model *m = &w.m;
  for (int l = 0; l < 48; l++) {
    cr_expect_eq(wl_model_layer_is_linear(m, l), l % 4 != 3, "layer %d", l);
    cr_expect_eq(wl_model_layer_is_variant(m, l), l % 4 != 3, "layer %d's segments", l);
  }
  cr_expect(!wl_model_layer_is_linear(m, 48), "the MTP layer is of the last layer's kind (full attention)");
  cr_expect_eq(wl_model_linear_conv_channels(m), 2 * 16 * 128 + 32 * 128);
  cr_expect_eq(wl_model_linear_in_cols(m), 2 * 16 * 128 + 2 * 32 * 128 + 2 * 32);
  /* in_proj_qkvz + in_proj_ba, out_proj; conv weights, A_log, dt_bias, the gated norm's weight */
  double lin = 2048.0 * 12352 + 4096.0 * 2048 + 8192.0 * 4 + 64 + 128;
  /* q and its gate, k, v, o; the QK norms */
  double full = 2048.0 * (2 * 16 * 256 + 2 * 2 * 256) + 4096.0 * 2048 + 2 * 256;
  double moe = (512 + 1) * 3 * 2048.0 * 512 + 2048.0 * 512, norms = 2 * 2048.0;
  tw_close(wl_model_layer_params(m, 0), lin + moe + norms, 1e-12, "a linear layer");
  tw_close(wl_model_layer_params(m, 3), full + moe + norms, 1e-12, "a full-attention layer");
  double emb = 2 * 151936.0 * 2048 + 2048;
  tw_close(wl_model_params(m), emb + 36 * lin + 12 * full + 48 * (moe + norms), 1e-12, "the model");
  /* model FLOPs: the 12 full layers' attention over 4096 keys, the 36 linear layers' recurrence
   * (18 k_dim v_dim per token and value head), with the MTP layer (full) */
  double f = wl_model_flops(m, 1, false);
  struct wl_model dense = w.m;
  dense.linear.heads = 0;
  dense.linear.full_every = 0;
  /* the same model with every layer's attention counted as softmax attention */
  double fd = wl_model_flops(&dense, 1, false);
  double attn_full = 6.0 * 4096 * 16 * (256 + 256), rec = 18.0 * 32 * 128 * 128;
  double mat_delta = 36 * ((lin - 64 - 128 - 8192.0 * 4) - (full - 2 * 256)); /* matrices only */
  tw_close(f - fd, 6 * mat_delta + 36 * (rec - attn_full), 1e-9, "the linear layers' FLOPs");
  tw_fini(&w);
}

/* The n of a segment's first GEMM (the attention block's input projection). */
static int64_t first_gemm(const struct wl_program *p, int k)
{
  const struct wl_seg *sg = &p->seg[k];
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (!it->coll && !strcmp(p->kernels[it->index].op, "gemm")) return (int64_t)op_call_u(&p->kernels[it->index].call, "n");
  }
  return 0;
}

/* tiny (8 layers, 1024 tokens, hidden 1024) with linear layers of 8 value heads and 4 query/key
 * heads of 128 and full attention every 4th layer, on tp 2: the linear layers' segments (the
 * second kind) run the gated delta rule on 4 value and 2 query/key heads a rank with its causal
 * convolution over (2 x 4 x 128 + 8 x 128) / 2 channels, and no FlashAttention; the full layers'
 * run FlashAttention and no gated delta rule. */
Test(linear, each_kind_of_layer_runs_its_own_attention, .timeout = 30)
{
  struct wl_job job;
  const char *sets[] = {"model.linear.heads=8", "model.linear.k_heads=4", "model.linear.full_every=4", "plan.tp=2",
                        "plan.pp=1"};
  tw_job_load(&job, SCN "tiny.cfg", sets, 5);
  struct wl_program *p = wl_program_expand(&job);
  int lf = WL_SEG_KINDS + WL_SEG_LAYER_F, lb = WL_SEG_KINDS + WL_SEG_LAYER_BI;
  struct op_call c;
  cr_assert_eq(tw_count_op(p, lf, "gated_delta", &c), 1, "one gated delta rule in a linear layer's forward");
  cr_expect_eq(op_call_u(&c, "heads"), 4);
  cr_expect_eq(op_call_u(&c, "k_heads"), 2);
  cr_expect_eq(op_call_u(&c, "seq"), 1024);
  cr_expect_eq(op_call_u(&c, "chunk"), 64);
  cr_assert_eq(tw_count_op(p, lf, "causal_conv1d", &c), 1);
  cr_expect_eq(op_call_u(&c, "channels"), (2 * 4 * 128 + 8 * 128) / 2);
  cr_expect_eq(op_call_u(&c, "width"), 4);
  cr_expect_eq(tw_count_op(p, lf, "flash_attention", NULL), 0);
  cr_expect_eq(first_gemm(p, lf), (2 * 4 * 128 + 2 * 8 * 128 + 2 * 8) / 2, "q, k, v, z, b, a on a rank");
  cr_expect_eq(tw_count_op(p, lb, "gated_delta", NULL), 1, "its backward");
  cr_expect_eq(tw_count_op(p, lb, "flash_attention", NULL), 0, "no FlashAttention in its backward");
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "gated_delta", NULL), 0, "the full layers");
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "flash_attention", NULL), 1);
  wl_program_destroy(p);
  wl_job_release(&job);

  /* every layer linear (full_every 0): the first kind's segments are linear, no second kind */
  const char *all[] = {"model.linear.heads=8", "model.linear.k_heads=4", "plan.pp=1"};
  tw_job_load(&job, SCN "tiny.cfg", all, 3);
  p = wl_program_expand(&job);
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "gated_delta", NULL), 1);
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "flash_attention", NULL), 0);
  cr_expect_eq(p->seg[lf].nitems, 0, "no second kind");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* Gated attention: the query projection gives the gate too ((2 x 8 + 2 x 8) x 128 columns), and
 * the output is gated once forward, once backward. */
Test(linear, gated_attention_widens_the_query_projection_and_gates_the_output, .timeout = 30)
{
  struct wl_job job;
  tw_job_load(&job, SCN "tiny.cfg", (const char *const[]){"model.attn_gate=true", "plan.pp=1"}, 2);
  struct wl_program *p = wl_program_expand(&job);
  int64_t qkv = first_gemm(p, WL_SEG_LAYER_F);
  cr_expect_eq(qkv, (2 * 8 + 2 * 8) * 128, "the first GEMM: q, gate, k, v");
  struct op_call c;
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_F, "swiglu", &c), 2, "the gate and the MLP's SwiGLU");
  cr_expect_eq(tw_count_op(p, WL_SEG_LAYER_BI, "swiglu", NULL), 2, "and their backward");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* Memory: a linear layer keeps its convolution's input and output, z, b, a, g, beta, the inverse
 * norms, the chunk matrices, the gated norm's input and output instead of Q, K, V, the attention
 * output and its log-sum-exp. */
Test(linear, a_linear_layer_keeps_its_own_activations, .timeout = 30)
{
  const char *sets[] = {"plan.global_batch=16", "plan.ep=8", NULL};
  struct tw w;
  tw_load(&w, "qwen3-next-80b-a3b", 16, sets);
  double lin = wl_memory_layer_activations(&w.m, &w.p, 0), full = wl_memory_layer_activations(&w.m, &w.p, 3);
  double tokens = 4096, conv = 8192, hv = 32, vw = 32 * 128.0;
  double lin_own = 2 * (2 * conv + vw + 2 * hv + hv * 64 + vw) + 4 * (2 * hv + 2 * 16) + 2 * vw;
  /* full: QK norm inputs (q + k), the gate, Q, K, V, the output, fp32 log-sum-exp per head */
  double q = 16 * 256.0, k = 2 * 256.0;
  double full_own = 2 * (q + k) + 2 * q + 2 * (q + 2 * k) + 2 * q + 4 * 16;
  tw_close(lin - full, tokens * (lin_own - full_own), 1e-9, "linear minus full activations");
  tw_fini(&w);
}

static void load_fails(const char *const *sets, int n, const char *key, const char *words)
{
  tw_job_refused(SCN "tiny.cfg", sets, n, key, words);
}

Test(linear, what_the_model_cannot_cost_is_refused, .timeout = 30)
{
  load_fails((const char *const[]){"model.linear.heads=6", "model.linear.k_heads=4"}, 2, "model.linear.k_heads",
             "evenly");
  load_fails((const char *const[]){"model.linear.full_every=4"}, 1, "model.linear.heads", "model.linear.heads is 0");
  load_fails((const char *const[]){"model.linear.heads=8", "model.linear.chunk=48"}, 2, "model.linear.chunk",
             "whole number of chunks");
  load_fails((const char *const[]){"model.linear.heads=8", "model.window=256"}, 2, "model.linear.heads",
             "sliding window");
  load_fails((const char *const[]){"model.linear.heads=8", "plan.cp=2", "plan.pp=1"}, 3, "plan.cp", "linear-attention");
  load_fails((const char *const[]){"model.linear.heads=8", "model.linear.k_heads=2", "plan.tp=4", "plan.pp=1"}, 4,
             "plan.tp", "model.linear.k_heads");
  load_fails((const char *const[]){"model.qkv_bias=true", "model.bias=true"}, 2, "model.qkv_bias", "every linear");
  /* inference engines refuse what they cannot cost */
  struct wl_model m;
  memset(&m, 0, sizeof m);
  const char *key = NULL;
  cr_expect_null(wl_model_inference_gap(&m, &key));
  m.linear.heads = 8;
  cr_expect_not_null(wl_model_inference_gap(&m, &key));
  cr_expect_str_eq(key, "model.linear.heads");
}

/* Biases on Q, K and V only: their widths, on top of the same model without. */
Test(linear, qkv_biases_add_the_projections_widths, .timeout = 30)
{
  const char *with[] = {"plan.global_batch=16", "model.qkv_bias=true", NULL}, *without[] = {"plan.global_batch=16", NULL};
  struct tw a, b;
  tw_load(&a, "llama3-8b", 8, with);
  tw_load(&b, "llama3-8b", 8, without);
  tw_close(wl_model_params(&a.m) - wl_model_params(&b.m), 32 * (4096.0 + 2 * 1024), 1e-12, "QKV biases");
  tw_fini(&a);
  tw_fini(&b);
}
