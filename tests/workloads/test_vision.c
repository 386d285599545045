/*
 * test_vision.c - a vision encoder in front of the language model (model.vision, LLaVA-style
 * multimodal training): its parameters in closed form, its calls in the first chunk's embedding
 * segments (bidirectional FlashAttention per image, the projector), a frozen encoder's forward
 * only, its memory (frozen weights without gradients or optimizer states), model FLOPs, and what
 * cannot be costed refused.
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

/* CLIP ViT-L/14 at 336 pixels (LLaVA-1.5): patch embedding 588 x 1024 and its bias, 577 learned
 * positions, 24 layers of Q, K, V, O (4 x 1024^2 and biases) and a GeLU MLP 1024 x 4096 x 2 (and
 * biases), two LayerNorms each, a final LayerNorm; the projector 1024 x 4096 and 4096 x 4096 with
 * biases. LLaVA-1.5-7B is Llama 2 7B (6,738,415,616) with them. */
Test(vision, the_encoder_and_projector_have_their_parameters, .timeout = 30)
{
  const char *sets[] = {"plan.global_batch=16", NULL};
  struct tw w;
  tw_load(&w, "llava-1.5-7b", 8, sets);
  double vh = 1024, f = 4096;
  double layer = 4 * vh * vh + 4 * vh + 2 * vh * f + f + vh + 4 * vh;
  double enc = 588 * vh + vh + 577 * vh + 24 * layer + 2 * vh;
  double proj = vh * 4096 + 4096.0 * 4096 + 2 * 4096;
  tw_close(wl_model_vision_params(&w.m, false, false), enc + proj, 1e-12, "encoder and projector");
  tw_close(wl_model_vision_params(&w.m, true, false), proj, 1e-12, "frozen: the projector trains");
  tw_close(wl_model_params(&w.m), 6738415616.0 + enc + proj, 1e-12, "LLaVA-1.5-7B");
  tw_close(wl_model_vision_ratio(&w.m), 577.0 / 2048, 1e-15, "encoder tokens per sequence token");
  tw_fini(&w);
}

/* tiny (hidden 1024, 1024 tokens, micro-batch 1) with an encoder of 2 layers, hidden 256 in 4
 * heads, MLP 1024, 2 images of 200 tokens a sample, merged 2 to 1: the first chunk's forward
 * embedding segment runs the patch embedding, 2 x (QKV, attention, O, fc1, fc2) and the
 * projector's two GEMMs, FlashAttention non-causal over 2 images of 256 (200 rounded up to the
 * kernel's key blocks); trained, its backward runs the attention's backward twice, frozen none and
 * only the projector's GEMMs (fc2's two gradients, fc1's weight gradient). */
#define VISION "model.vision.layers=2", "model.vision.hidden=256", "model.vision.heads=4", "model.vision.ffn=1024", \
               "model.vision.patches=200", "model.vision.images=2", "model.vision.merge=2", "plan.micro_batch=1"

Test(vision, the_encoder_runs_in_the_embedding_segments, .timeout = 30)
{
  struct wl_job job;
  const char *trained[] = {VISION};
  tw_job_load(&job, SCN "tiny.cfg", trained, 8);
  struct wl_program *p = wl_program_expand(&job);
  struct op_call c;
  cr_assert_eq(tw_count_op(p, WL_SEG_EMBED_F, "flash_attention", &c), 2, "one attention per encoder layer");
  cr_expect_eq(op_call_u(&c, "batch"), 2, "the sample's two images");
  cr_expect_eq(op_call_u(&c, "seq"), 256);
  cr_expect_eq(op_call_u(&c, "heads"), 4);
  cr_expect_eq(op_call_u(&c, "dim"), 64);
  cr_expect(!op_call_u(&c, "causal"), "bidirectional");
  cr_expect_eq(tw_count_op(p, WL_SEG_EMBED_F, "gemm", &c), 1 + 2 * 4 + 2, "patches, 2 layers of 4, the projector");
  cr_expect_eq(op_call_u(&c, "m"), 400, "the patch embedding over 2 x 200 tokens");
  cr_expect_eq(op_call_u(&c, "k"), 588);
  cr_expect_eq(tw_count_op(p, WL_SEG_EMBED_B, "flash_attention", NULL), 2, "trained: the attention's backward");
  wl_program_destroy(p);
  wl_job_release(&job);

  const char *frozen[] = {VISION, "model.vision.frozen=true"};
  tw_job_load(&job, SCN "tiny.cfg", frozen, 9);
  p = wl_program_expand(&job);
  cr_expect_eq(tw_count_op(p, WL_SEG_EMBED_F, "flash_attention", NULL), 2, "a frozen encoder still runs forward");
  cr_expect_eq(tw_count_op(p, WL_SEG_EMBED_B, "flash_attention", NULL), 0, "and has no backward");
  cr_expect_eq(tw_count_op(p, WL_SEG_EMBED_B, "gemm", &c), 3, "the projector's fc2 (dX, dW) and fc1 (dW)");
  cr_expect_eq(op_call_u(&c, "m"), 200, "the merged tokens");
  wl_program_destroy(p);
  wl_job_release(&job);
}

/* A frozen encoder's weights are held without gradients or optimizer states; the trained one's
 * add 4 bytes of gradient and 12 of optimizer state per parameter (ZeRO 1 over dp 8 for the
 * latter), and their activations. */
Test(vision, a_frozen_encoder_holds_weights_only, .timeout = 30)
{
  const char *fz[] = {"plan.global_batch=16", "plan.zero=0", NULL};
  const char *tr[] = {"plan.global_batch=16", "plan.zero=0", "model.vision.frozen=false", NULL};
  struct tw a, b;
  tw_load(&a, "llava-1.5-7b", 8, fz);
  tw_load(&b, "llava-1.5-7b", 8, tr);
  struct wl_mem ma, mb;
  wl_memory_stage(&a.m, &a.p, 0, &ma);
  wl_memory_stage(&b.m, &b.p, 0, &mb);
  double enc = wl_model_vision_params(&a.m, false, false) - wl_model_vision_params(&a.m, true, false);
  tw_close(ma.weights_bytes, mb.weights_bytes, 1e-12, "the same weights");
  tw_close(mb.grads_bytes - ma.grads_bytes, 4 * enc, 1e-9, "the encoder's fp32 gradients");
  tw_close(mb.optimizer_bytes - ma.optimizer_bytes, 12 * enc, 1e-9, "and optimizer states");
  cr_expect_gt(mb.activations_bytes, ma.activations_bytes, "the trained encoder keeps its activations");
  tw_fini(&a);
  tw_fini(&b);
}

/* Model FLOPs add, per sequence token, 577 / 2048 encoder tokens' 2 x matrices and attention
 * (frozen: forward only) and the projector's 4 x matrices (no input gradient). */
Test(vision, model_flops_count_the_encoder_forward_when_frozen, .timeout = 30)
{
  const char *sets[] = {"plan.global_batch=16", NULL};
  struct tw w;
  tw_load(&w, "llava-1.5-7b", 8, sets);
  struct wl_model text = w.m;
  memset(&text.vision, 0, sizeof text.vision);
  double vh = 1024, mats = 588 * vh + 24 * (4 * vh * vh + 2 * vh * 4096), proj = vh * 4096 + 4096.0 * 4096;
  double r = 577.0 / 2048, want = r * (2 * mats + 4.0 * 577 * vh * 24) + r * 4 * proj;
  tw_close(wl_model_flops(&w.m, 1, true) - wl_model_flops(&text, 1, true), want, 1e-9, "the encoder's FLOPs");
  tw_fini(&w);
}

static void load_fails(const char *const *sets, int n, const char *key, const char *words)
{
  tw_job_refused(SCN "tiny.cfg", sets, n, key, words);
}

Test(vision, what_the_encoder_cannot_be_is_refused, .timeout = 30)
{
  load_fails((const char *const[]){"model.vision.hidden=256"}, 1, "model.vision.layers", "model.vision.layers is 0");
  load_fails((const char *const[]){VISION, "model.vision.images=12"}, 9, "model.vision.images", "exceed");
  load_fails((const char *const[]){VISION, "model.vision.heads=8"}, 9, "model.vision.heads", "multiple of 64");
  load_fails((const char *const[]){VISION, "model.vision.merge=3"}, 9, "model.vision.merge", "merge");
  load_fails((const char *const[]){VISION, "plan.cp=2", "plan.pp=1"}, 10, "plan.cp", "vision encoder");
  load_fails((const char *const[]){VISION, "plan.tp=8", "plan.pp=1"}, 10, "plan.tp", "vision encoder");
  struct wl_model m;
  memset(&m, 0, sizeof m);
  m.vision.layers = 2;
  const char *key = NULL;
  cr_expect_not_null(wl_model_inference_gap(&m, &key));
  cr_expect_str_eq(key, "model.vision.layers");
}
