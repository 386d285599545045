/*
 * test_expand.c - the operator calls a training step's expansion builds: for a set of models and
 * plans (every training scenario, and the tiny models with each expansion branch turned on),
 * every kernel is a call the operator registry accepts. With NPUSIM_DUMP_CALLS=FILE the kernel
 * labels and items are appended to FILE (to compare an expansion before and after a change).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "workloads/expand.h"
#include "workloads/program.h"
#include "workloads/job.h"

#define SRC NPUSIM_SOURCE_DIR "/"
#define DATA "tests/workloads/data/"

TestSuite(expand, .timeout = 120);

/* A scenario file and up to 6 "key=value" overrides. */
static const struct {
  const char *file;
  const char *sets[6];
} cases[] = {
    {"scenarios/default.cfg", {NULL}},
    {"scenarios/deepseek_v3_a3_superpod.cfg", {NULL}},
    {"scenarios/validation/deepseek_v3_h800.cfg", {NULL}},
    {"scenarios/validation/korthikanti_gpt3_175b.cfg", {NULL}},
    {"scenarios/validation/korthikanti_gpt3_1t.cfg", {NULL}},
    {"scenarios/validation/korthikanti_gpt3_22b.cfg", {NULL}},
    {"scenarios/validation/korthikanti_gpt3_530b.cfg", {NULL}},
    {"scenarios/validation/mindspeed_llama2_13b.cfg", {NULL}},
    {"scenarios/validation/mindspeed_llama2_70b.cfg", {NULL}},
    {"scenarios/validation/mindspeed_llama2_7b.cfg", {NULL}},
    {"scenarios/validation/mindspeed_llama3_8b.cfg", {NULL}},
    {"scenarios/validation/mindspeed_mixtral_8x7b_32k.cfg", {NULL}},
    {"scenarios/validation/pangu_ultra_135b.cfg", {NULL}},
    {DATA "tiny.cfg", {NULL}},
    {DATA "tiny.cfg", {"model.attention=\"standard\"", "model.dropout=0.1", "plan.recompute=\"selective\""}},
    {DATA "tiny.cfg", {"model.attention=\"standard\"", "plan.recompute=\"full\"", "plan.tp=2", "plan.sp=true"}},
    {DATA "tiny.cfg", {"model.activation=\"gelu\"", "model.norm=\"layernorm\"", "model.position=\"learned\"",
                       "model.dropout=0.1", "plan.tp=2"}},
    {DATA "tiny.cfg", {"model.sandwich_norm=true", "plan.dtype=\"fp16\"", "plan.recompute=\"full\""}},
    {DATA "tiny.cfg", {"plan.cp=2", "plan.pp=1"}},
    {DATA "tiny_moe.cfg", {NULL}},
    {DATA "tiny_moe.cfg", {"plan.tp=2", "plan.sp=true", "plan.ep=2", "plan.recompute=\"full\""}},
    {DATA "moe_many_collectives.cfg", {NULL}},
    {DATA "tiny_fp8.cfg", {NULL}},
    {DATA "tiny_fp8.cfg", {"plan.fp8_recipe=\"tensor\""}},
    {DATA "tiny_fp8.cfg", {"plan.fp8_recipe=\"tensor\"", "plan.tp=1", "plan.sp=false", "plan.recompute=\"full\""}},
    {DATA "tiny_fp8.cfg", {"plan.tp_overlap=\"megatron\"", "plan.recompute=\"full\""}},
    {DATA "tiny_fp8.cfg", {"plan.tp_overlap=\"megatron\"", "plan.dtype=\"bf16\"", "plan.schedule=\"zb_h1\"", "plan.pp=2"}},
    {DATA "tiny.cfg", {"plan.tp=2", "plan.sp=true", "plan.tp_overlap=\"mc2\"", "plan.recompute=\"full\""}},
    {DATA "tiny_moe.cfg", {"plan.tp=2", "plan.sp=true", "plan.ep=2", "plan.etp=1"}},
    {DATA "tiny_moe.cfg", {"plan.tp=2", "plan.sp=true", "plan.ep=2", "plan.tp_overlap=\"mc2\""}},
    {DATA "tiny_moe.cfg", {"plan.recompute=\"full\"", "plan.recompute_method=\"block\"", "plan.recompute_layers=1"}},
    {"scenarios/validation/fms_fsdp_llama2_7b.cfg", {NULL}},
    {DATA "tiny.cfg", {"plan.fusion=\"eager\"", "plan.recompute=\"full\"", "plan.tp=2", "plan.sp=true"}},
    {DATA "tiny.cfg", {"plan.fusion=\"eager\"", "model.activation=\"gelu\"", "model.norm=\"layernorm\""}},
    {DATA "tiny_moe.cfg", {"plan.fusion=\"eager\""}},
    {DATA "tiny.cfg", {"model.doc_len=256", "plan.pp=1", "plan.cp=2"}},
    {DATA "tiny.cfg", {"plan.offload_layers=2", "node.host.bandwidth=50GBps", "plan.recompute=\"selective\""}},
};
#define NCASES (sizeof cases / sizeof cases[0])

static void load(struct wl_job *j, size_t c)
{
  char path[1024], msg[1024];
  snprintf(path, sizeof path, SRC "%s", cases[c].file);
  int n = 0;
  while (n < 6 && cases[c].sets[n]) n++;
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = wl_job_load(j, path, cases[c].sets, n, &d);
  npu_diag_format(&d, msg, sizeof msg);
  cr_assert_eq(rc, 0, "case %zu (%s): %s", c, cases[c].file, msg);
  cr_assert(wl_job_is_training(j), "case %zu: %s is not a training scenario", c, cases[c].file);
}

/* Append case c's kernels and items to FILE. */
static void dump(const struct wl_program *j, size_t c, const char *file)
{
  FILE *f = fopen(file, "a");
  cr_assert(f != NULL, "cannot open %s", file);
  fprintf(f, "case %zu %s", c, cases[c].file);
  for (int i = 0; i < 6 && cases[c].sets[i]; i++) fprintf(f, " %s", cases[c].sets[i]);
  fprintf(f, "\n");
  for (int i = 0; i < j->nkernels; i++) {
    char label[512];
    wl_kernel_label(&j->kernels[i], label, sizeof label);
    fprintf(f, "k%d %s\n", i, label);
  }
  for (int i = 0; i < j->nitems; i++) {
    const struct wl_item *it = &j->items[i];
    fprintf(f, "i%d cat=%d rc=%d coll=%d index=%d hide=%d ovl=%d slowed=%d\n", i, it->cat, it->recompute, it->coll,
            it->index, it->hide, it->ovl, it->slowed);
  }
  for (int k = 0; k < WL_SEG_KINDS; k++) fprintf(f, "seg%d %d+%d\n", k, j->seg[k].first_item, j->seg[k].nitems);
  fclose(f);
}

Test(expand, every_call_of_every_case_is_valid)
{
  const char *file = getenv("NPUSIM_DUMP_CALLS");
  for (size_t c = 0; c < NCASES; c++) {
    struct wl_job job;
    load(&job, c);
    struct wl_program *p = wl_program_expand(&job);
    cr_assert_gt(p->nkernels, 0);
    if (file) dump(p, c, file);
    for (int k = 0; k < p->nkernels; k++) {
      struct npu_diag d;
      char label[512], msg[1024];
      npu_diag_clear(&d);
      int rc = op_call_check(&p->kernels[k].call, &d);
      npu_diag_format(&d, msg, sizeof msg);
      wl_kernel_label(&p->kernels[k], label, sizeof label);
      cr_expect_eq(rc, 0, "case %zu (%s): kernel %s: %s", c, cases[c].file, label, msg);
    }
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* The expansion of tests/workloads/data/tiny.cfg with sets (NULL-terminated) into job. */
static struct wl_program *tiny_expanded(struct wl_job *job, const char *const *sets)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  int n = 0;
  while (sets[n]) n++;
  cr_assert_eq(wl_job_load(job, SRC DATA "tiny.cfg", sets, n, &d), 0, "%s", d.msg);
  return wl_program_expand(job);
}

/* The eltwise kernels among the items of segment k. */
static int eltwise_items(const struct wl_program *p, enum wl_seg_kind k)
{
  int n = 0;
  for (int i = p->seg[k].first_item; i < p->seg[k].first_item + p->seg[k].nitems; i++) {
    const struct wl_item *it = &p->items[i];
    char label[512];
    if (it->coll) continue;
    wl_kernel_label(&p->kernels[it->index], label, sizeof label);
    n += strncmp(label, "eltwise ", 8) == 0;
  }
  return n;
}

/* plan.fusion = eager: a dense Llama layer (RMSNorm, RoPE, SwiGLU) launches the recipes of
 * docs/TRAINING.md: forward 2 x (residual add + 8 norm kernels) + 2 x 5 (RoPE on q and on k)
 * + 2 (SiLU, multiply) + 1 (the attention output's copy) = 31; backward 2 x (1 + 13) + 2 x 6 + 3
 * + 1 = 44; fused: none. With LayerNorm and GeLU (one PyTorch kernel each) only the residual
 * adds, RoPE and the copy remain: 2 + 10 + 1 = 13 forward, 2 + 12 + 1 = 15 backward. */
Test(expand, eager_modules_launch_their_recipes)
{
  const char *eager[] = {"plan.fusion=\"eager\"", "plan.pp=1", NULL}, *fused[] = {"plan.pp=1", NULL},
             *ln[] = {"plan.fusion=\"eager\"", "plan.pp=1", "model.norm=\"layernorm\"", "model.activation=\"gelu\"", NULL};
  const char *const *sets[] = {eager, fused, ln};
  int want_f[] = {31, 0, 13}, want_b[] = {44, 0, 15};
  for (int c = 0; c < 3; c++) {
    struct wl_job job;
    struct wl_program *p = tiny_expanded(&job, sets[c]);
    cr_expect_eq(eltwise_items(p, WL_SEG_LAYER_F), want_f[c], "case %d: forward %d", c, eltwise_items(p, WL_SEG_LAYER_F));
    cr_expect_eq(eltwise_items(p, WL_SEG_LAYER_BI), want_b[c], "case %d: backward %d", c,
                 eltwise_items(p, WL_SEG_LAYER_BI));
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* The label of the first flash_attention kernel of p, or "". */
static const char *flash_label(const struct wl_program *p, char *label, size_t n)
{
  label[0] = '\0';
  for (int k = 0; k < p->nkernels; k++) {
    wl_kernel_label(&p->kernels[k], label, n);
    if (strncmp(label, "flash_attention ", 16) == 0) return label;
  }
  label[0] = '\0';
  return label;
}

/* model.doc_len: each sequence of 1024 is 4 documents of 256, attended alone: FlashAttention
 * over a batch 4 times larger of sequences of 256; with cp 2 each document's queries split in
 * two blocks of 128 against its keys (batch 2 x 4 x 2 = 16 of 128). */
Test(expand, packed_documents_are_attended_one_by_one)
{
  const char *one[] = {"model.doc_len=256", "plan.pp=1", "plan.micro_batch=2", NULL},
             *cp[] = {"model.doc_len=256", "plan.pp=1", "plan.cp=2", "plan.micro_batch=2", NULL};
  const char *const *sets[] = {one, cp};
  const char *want[] = {"batch=8 ", "batch=16 "}, *seq[] = {"seq=256 ", "seq=128 "};
  for (int c = 0; c < 2; c++) {
    struct wl_job job;
    struct wl_program *p = tiny_expanded(&job, sets[c]);
    char label[512];
    flash_label(p, label, sizeof label);
    cr_expect(strstr(label, want[c]) && strstr(label, seq[c]), "case %d: %s", c, label);
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* MLA's attention runs its non-absorbed form on the FlashAttention kernel with its own head
 * dimensions: queries and keys of nope + rope = 128 + 64 = 192, values of 128, a key and value
 * per head (8 heads of tiny.cfg, over TP 2: 4 per rank); dimensions the kernel does not take
 * (a value dimension of 96) fall back to head dimension 128 at the same FLOPs: 4 x (192 + 96)
 * / 256 = 4.5, rounded up to 5 heads. */
Test(expand, mla_attention_runs_with_its_own_head_dims)
{
  const char *mla[] = {"plan.pp=1", "plan.tp=2", "plan.sp=true", "model.mla.q_lora_rank=256", "model.mla.kv_lora_rank=128",
                       "model.mla.qk_nope_head_dim=128", "model.mla.qk_rope_head_dim=64", "model.mla.v_head_dim=128", NULL};
  const char *odd[] = {"plan.pp=1", "plan.tp=2", "plan.sp=true", "model.mla.q_lora_rank=256", "model.mla.kv_lora_rank=128",
                       "model.mla.qk_nope_head_dim=128", "model.mla.qk_rope_head_dim=64", "model.mla.v_head_dim=96", NULL};
  const char *const *sets[] = {mla, odd};
  const char *want[][3] = {{"heads=4 ", "dim=192 ", "dim_v=128"}, {"heads=5 ", "dim=128 ", "kv_heads=5 "}};
  for (int c = 0; c < 2; c++) {
    struct wl_job job;
    struct wl_program *p = tiny_expanded(&job, sets[c]);
    char label[512];
    flash_label(p, label, sizeof label);
    for (int k = 0; k < 3; k++) cr_expect(strstr(label, want[c][k]) != NULL, "case %d: %s", c, label);
    wl_program_destroy(p);
    wl_job_release(&job);
  }
}

/* The sum of n over the gradient-accumulation adds of segment k (*count: how many), and the
 * weight-gradient GEMMs writing fp32 (*fp32). */
static int64_t accum_elements(const struct wl_program *p, enum wl_seg_kind k, int *count, int *fp32)
{
  int64_t n = 0;
  *count = *fp32 = 0;
  for (int i = p->seg[k].first_item; i < p->seg[k].first_item + p->seg[k].nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->coll) continue;
    const struct op_call *c = &p->kernels[it->index].call;
    char label[512];
    wl_kernel_label(&p->kernels[it->index], label, sizeof label);
    if (it->accum) {
      cr_expect(strstr(label, "fn=acc") && strstr(label, "in=bf16") && strstr(label, "out=fp32"), "%s", label);
      n += (int64_t)op_call_u(c, "n");
      (*count)++;
    }
    if (it->wgrad && strstr(label, "out=fp32")) (*fp32)++;
  }
  return n;
}

/* plan.grad_accum_fusion: a dense layer's four weight gradients (qkv, output, gate+up, down of
 * tiny.cfg: h 1024, 8 heads of 128, ffn 2816) are added into the fp32 buffer by one add each
 * over the weight's elements, 1024 x 3072 + 1024 x 1024 + 1024 x 5632 + 2816 x 1024 =
 * 12,845,056, when unfused; fused, the four GEMMs write fp32 and nothing is added; ZeRO-3 has
 * no buffer to add to and refuses the unfused setting. */
Test(expand, unfused_gradient_accumulation_adds_each_weight_gradient)
{
  const char *unfused[] = {"plan.grad_accum_fusion=false", "plan.pp=1", NULL}, *fused[] = {"plan.pp=1", NULL};
  struct wl_job job;
  struct wl_program *p = tiny_expanded(&job, unfused);
  int count, fp32;
  cr_expect_eq(accum_elements(p, WL_SEG_LAYER_W, &count, &fp32), 12845056);
  cr_expect_eq(count, 4);
  cr_expect_eq(fp32, 0);
  wl_program_destroy(p);
  wl_job_release(&job);
  p = tiny_expanded(&job, fused);
  cr_expect_eq(accum_elements(p, WL_SEG_LAYER_W, &count, &fp32), 0);
  cr_expect_eq(count, 0);
  cr_expect_eq(fp32, 4);
  wl_program_destroy(p);
  wl_job_release(&job);

  const char *z3[] = {"plan.grad_accum_fusion=false", "plan.zero=3"};
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_expect_eq(wl_job_load(&job, SRC DATA "tiny.cfg", z3, 2, &d), NPU_ECONFIG);
  cr_expect_str_eq(d.key, "plan.grad_accum_fusion", "%s: %s", d.key, d.msg);
  wl_job_release(&job);
}

/* The n of item i of segment k when it is an eltwise cast from bf16 to `out`, else -1. */
static int64_t cast_n(const struct wl_program *p, enum wl_seg_kind k, int i, const char *out)
{
  const struct wl_seg *sg = &p->seg[k];
  const struct wl_item *it = &p->items[sg->first_item + (i < 0 ? sg->nitems + i : i)];
  if (it->coll) return -1;
  char label[512], want[32];
  wl_kernel_label(&p->kernels[it->index], label, sizeof label);
  snprintf(want, sizeof want, "out=%s", out);
  if (!strstr(label, "fn=cast") || !strstr(label, "in=bf16") || !strstr(label, want)) return -1;
  return (int64_t)op_call_u(&p->kernels[it->index].call, "n");
}

/* plan.zero3_impl = per_param (FSDP2): a layer of tiny.cfg (h 1024, ffn 2816: 12,845,056 weight
 * elements and two norms of 1024, 12,847,104 parameters) is copied out of its gather before its
 * forward and before its backward, and its gradients copied into the fp32 reduce-scatter input
 * after the weight gradients; the embedding (8192 x 1024 = 8,388,608) likewise. flat (FSDP1)
 * copies nothing, and per_param without ZeRO-3 is refused. */
Test(expand, fsdp2_copies_each_gather_out_and_each_reduction_in)
{
  const char *per[] = {"plan.zero=3", "plan.zero3_impl=\"per_param\"", "plan.pp=1", NULL};
  const char *flat[] = {"plan.zero=3", "plan.pp=1", NULL};
  struct wl_job job;
  struct wl_program *p = tiny_expanded(&job, per);
  cr_expect_eq(wl_model_layer_params(&p->model, 0), 12847104.0);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_F, 0, "bf16"), 12847104);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_BI, 0, "bf16"), 12847104);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_W, -1, "fp32"), 12847104);
  cr_expect_eq(cast_n(p, WL_SEG_EMBED_F, 0, "bf16"), 8388608);
  cr_expect_eq(cast_n(p, WL_SEG_EMBED_B, -1, "fp32"), 8388608);
  cr_expect_eq(cast_n(p, WL_SEG_HEAD_F, 0, "bf16"), 8388608 + 1024);
  wl_program_destroy(p);
  wl_job_release(&job);
  p = tiny_expanded(&job, flat);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_F, 0, "bf16"), -1);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_BI, 0, "bf16"), -1);
  cr_expect_eq(cast_n(p, WL_SEG_LAYER_W, -1, "fp32"), -1);
  wl_program_destroy(p);
  wl_job_release(&job);

  const char *z1[] = {"plan.zero3_impl=\"per_param\""};
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_expect_eq(wl_job_load(&job, SRC DATA "tiny.cfg", z1, 1, &d), NPU_ECONFIG);
  cr_expect_str_eq(d.key, "plan.zero3_impl", "%s: %s", d.key, d.msg);
  wl_job_release(&job);
}

/* How many eltwise adds in the training type (fn=acc, bf16 to bf16) of n elements segment k holds. */
static int merges_of(const struct wl_program *p, enum wl_seg_kind k, int64_t n)
{
  int count = 0;
  for (int i = p->seg[k].first_item; i < p->seg[k].first_item + p->seg[k].nitems; i++) {
    const struct wl_item *it = &p->items[i];
    if (it->coll) continue;
    char label[512];
    wl_kernel_label(&p->kernels[it->index], label, sizeof label);
    if (strstr(label, "fn=acc") && strstr(label, "in=bf16") && strstr(label, "out=bf16") &&
        (int64_t)op_call_u(&p->kernels[it->index].call, "n") == n)
      count++;
  }
  return count;
}

/* Ring attention's merges with CP 2 on tiny.cfg (sequence 1024: 512 tokens per rank, 8 heads and
 * 8 KV heads of 128): the forward adds each of the 2 steps' outputs into the rank's 512 x 8 x 128
 * = 524,288 output elements; the backward adds the second step's dQ (524,288) and dK, dV
 * (1,048,576); without CP there are none. */
Test(expand, ring_attention_merges_each_step)
{
  const char *cp2[] = {"plan.cp=2", "plan.pp=1", NULL}, *cp1[] = {"plan.pp=1", NULL};
  struct wl_job job;
  struct wl_program *p = tiny_expanded(&job, cp2);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_F, 524288), 2);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_BI, 524288), 1);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_BI, 1048576), 1);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_W, 524288), 0);
  wl_program_destroy(p);
  wl_job_release(&job);
  p = tiny_expanded(&job, cp1);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_F, 1048576), 0);
  cr_expect_eq(merges_of(p, WL_SEG_LAYER_BI, 1048576), 0);
  wl_program_destroy(p);
  wl_job_release(&job);
}
