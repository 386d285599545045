/*
 * job.c - loading a serving scenario: the system, the model, the run options and the `serve`
 * section, checked together; the deployment, the engine's memory and the workload are refused
 * here, before anything runs, with file:line and the key. The requests are built here too
 * (drawn, seeded, or read from the trace), so what is checked is what runs.
 */
#include "serve/serve.h"

#include <gsl/gsl_randist.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "serve/infer.h"
#include "workloads/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static void register_all(struct sv_job *job)
{
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  wl_model_register(job->cfg, &job->model);
  wl_run_register(job->cfg, &job->run);
  sv_spec_register(job->cfg, &job->spec);
}

/* An engine of TP size tp (chosen by key) must split the model's shapes evenly. */
static int check_tp(struct sv_job *job, int tp, const char *k, struct npu_diag *diag)
{
  const struct wl_model *m = &job->model;
  const struct sv_spec *s = &job->spec;
  if (tp > job->devices)
    return npu_cfg_fail(job->cfg, diag, k, "an engine of tp %d needs more than the %d devices of the system", tp,
                        job->devices);
  if (m->heads % tp)
    return npu_cfg_fail(job->cfg, diag, k, "tp %d does not divide the %d attention heads", tp, m->heads);
  if (m->kv_heads % tp && tp % m->kv_heads)
    return npu_cfg_fail(job->cfg, diag, k, "tp %d and the %d key/value heads neither divide nor replicate evenly", tp,
                        m->kv_heads);
  if (!m->moe.experts && m->ffn % tp)
    return npu_cfg_fail(job->cfg, diag, k, "tp %d does not divide the MLP size %d", tp, m->ffn);
  if (m->moe.experts && s->expert_parallel && m->moe.experts % tp)
    return npu_cfg_fail(job->cfg, diag, k, "%d experts do not spread evenly over %d ranks", m->moe.experts, tp);
  if (m->moe.experts && !s->expert_parallel && m->moe.ffn % tp)
    return npu_cfg_fail(job->cfg, diag, k, "tp %d does not divide the expert MLP size %d (try serve.expert_parallel "
                        "= true)", tp, m->moe.ffn);
  return 0;
}

/* The engines' layout must hold the model's shapes, and its kernels must exist; prefill
 * engines (disaggregated) take the first ranks, the (decode) engines the next. */
static int check_layout(struct sv_job *job, struct npu_diag *diag)
{
  const struct wl_model *m = &job->model;
  const struct sv_spec *s = &job->spec;
  int d = wl_model_head_dim(m);
  if (m->attention != WL_ATTN_FLASH || wl_model_is_mla(m) || d % 64 || d > 256)
    return npu_cfg_fail(job->cfg, diag, "model.attention", "serving costs prefill with the FlashAttention kernel and "
                        "decode with the paged-attention kernel: they need model.attention = \"flash\", no MLA, a head "
                        "dimension of a multiple of 64 up to 256 (this model: %d)", d);
  const char *gk, *gap = wl_model_inference_gap(m, &gk);
  if (gap) return npu_cfg_fail(job->cfg, diag, gk, "%s", gap);
  if (s->expert_parallel && !m->moe.experts)
    return npu_cfg_fail(job->cfg, diag, "serve.expert_parallel", "expert parallelism needs an MoE model");
  if (s->prefill_tp && !s->prefill_replicas)
    return npu_cfg_fail(job->cfg, diag, "serve.prefill.tp", "a prefill engine's tp needs serve.prefill.replicas "
                        "(prefill-decode disaggregation)");
  int rc = check_tp(job, s->tp, "serve.tp", diag);
  job->prefill_replicas = s->prefill_replicas;
  job->prefill_tp = s->prefill_replicas ? (s->prefill_tp ? s->prefill_tp : s->tp) : 0;
  if (!rc && job->prefill_replicas) rc = check_tp(job, job->prefill_tp, s->prefill_tp ? "serve.prefill.tp" : "serve.tp", diag);
  if (rc) return rc;
  int used = job->prefill_replicas * job->prefill_tp;
  if (used >= job->devices)
    return npu_cfg_fail(job->cfg, diag, "serve.prefill.replicas", "%d prefill engines of tp %d take %d of the %d "
                        "devices: none is left to decode", job->prefill_replicas, job->prefill_tp, used, job->devices);
  int fit = (job->devices - used) / s->tp;
  if (s->replicas > fit)
    return npu_cfg_fail(job->cfg, diag, "serve.replicas", "%d engines of tp %d need %d devices, the system has %d%s",
                        s->replicas, s->tp, s->replicas * s->tp, job->devices - used,
                        used ? " after the prefill engines" : "");
  if (!fit)
    return npu_cfg_fail(job->cfg, diag, "serve.tp", "the %d devices the prefill engines leave hold no decode engine "
                        "of tp %d", job->devices - used, s->tp);
  job->replicas = s->replicas ? s->replicas : fit;
  return 0;
}

/* Scheduler limits vLLM refuses too: a step must hold a token of every running sequence, and
 * without chunking a whole prompt. */
static int check_engine(struct sv_job *job, struct npu_diag *diag)
{
  const struct sv_spec *s = &job->spec;
  if (s->max_batched_tokens < s->max_num_seqs)
    return npu_cfg_fail(job->cfg, diag, "serve.max_batched_tokens", "a step must hold one token of each of the %d "
                        "running sequences (serve.max_num_seqs), got %d", s->max_num_seqs, s->max_batched_tokens);
  if (s->speculative != SV_SPEC_NONE) {
    if (!s->spec_tokens)
      return npu_cfg_fail(job->cfg, diag, "serve.speculative.tokens", "speculative decoding (%s) needs the draft "
                          "tokens per step", sv_speculative_name(s->speculative));
    const struct npu_origin *o = npu_cfg_origin(job->cfg, "serve.speculative.acceptance");
    if (!o || o->kind == NPU_ORIGIN_DEFAULT || o->kind == NPU_ORIGIN_UNSET)
      return npu_cfg_fail(job->cfg, diag, "serve.speculative.acceptance", "speculative decoding needs the acceptance "
                          "rate measured for its draft, model and data (vLLM reports it): there is no default");
    if (s->spec_acceptance > 1)
      return npu_cfg_fail(job->cfg, diag, "serve.speculative.acceptance", "a chance from 0 to 1, got %g",
                          s->spec_acceptance);
  } else if (s->spec_tokens) {
    return npu_cfg_fail(job->cfg, diag, "serve.speculative.tokens", "draft tokens need serve.speculative.method");
  }
  if (s->rate == 0 && s->burstiness != 1.0)
    return npu_cfg_fail(job->cfg, diag, "serve.burstiness", "burstiness shapes the gaps between arrivals: it needs "
                        "serve.rate");
  return 0;
}

/* A fixed distribution's longest length is its length, a histogram's its longest bin; a drawn
 * one (uniform, lognormal) needs it written. */
static int finish_dist(struct sv_job *job, const char *prefix, struct sv_dist *d, struct npu_diag *diag)
{
  bool implied = d->distribution == SV_DIST_FIXED || d->distribution == SV_DIST_HISTOGRAM;
  if (d->max == 0 && !implied) {
    char k[64];
    snprintf(k, sizeof k, "%s.max", prefix);
    return npu_cfg_fail(job->cfg, diag, k, "the %s distribution needs its longest length %s", sv_dist_names[d->distribution],
                        k);
  }
  bool unbounded = d->max == 0;
  if (unbounded) d->max = d->distribution == SV_DIST_FIXED ? d->mean : 1 << 24;
  int rc = sv_dist_finish(job->cfg, prefix, d, diag);
  if (!rc && unbounded && d->distribution == SV_DIST_HISTOGRAM) {
    d->max = 0;
    for (int i = 0; i < d->hist_n; i++) d->max = d->hist_len[i] > d->max ? d->hist_len[i] : d->max;
  }
  return rc;
}

/* Draw the requests: arrivals (gamma gaps), prompts, outputs, prefix groups, in that order. */
static void draw_requests(struct sv_job *job)
{
  const struct sv_spec *s = &job->spec;
  int n = s->requests;
  job->req = npu_xcalloc((size_t)n, sizeof *job->req);
  job->nreq = n;
  int *a = npu_xmalloc((size_t)n * sizeof *a), *b = npu_xmalloc((size_t)n * sizeof *b);
  gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
  gsl_rng_set(r, (unsigned long)s->seed);
  double t = 0;
  for (int i = 0; i < n; i++) {
    if (i && s->rate > 0) t += gsl_ran_gamma(r, s->burstiness, 1.0 / (s->rate * s->burstiness));
    job->req[i].arrival_s = t;
  }
  sv_dist_draw(&s->prompt, r, n, a);
  sv_dist_draw(&s->output, r, n, b);
  for (int i = 0; i < n; i++) {
    struct sv_request *q = &job->req[i];
    q->prefix = s->prefix_groups > 0 ? (int)gsl_rng_uniform_int(r, (unsigned long)s->prefix_groups) : -1;
    q->prefix_tokens = q->prefix >= 0 ? s->prefix_tokens : 0;
    q->prompt = q->prefix_tokens + a[i];
    q->output = b[i];
  }
  gsl_rng_free(r);
  free(a);
  free(b);
}

static int build_workload(struct sv_job *job, struct npu_diag *diag)
{
  struct sv_spec *s = &job->spec;
  if (s->trace[0]) {
    static const char *const drawn[] = {"serve.requests", "serve.rate", "serve.burstiness", "serve.prefix.groups",
                                        "serve.prompt.distribution", "serve.prompt.mean", "serve.output.distribution",
                                        "serve.output.mean"};
    for (size_t i = 0; i < sizeof drawn / sizeof drawn[0]; i++) {
      const struct npu_origin *o = npu_cfg_origin(job->cfg, drawn[i]);
      if (o && o->kind != NPU_ORIGIN_DEFAULT && o->kind != NPU_ORIGIN_UNSET)
        return npu_cfg_fail(job->cfg, diag, drawn[i], "the requests come from serve.trace: %s would not be used",
                            drawn[i]);
    }
    char shown[1024];
    if (!npu_cfg_resolve_path(job->cfg, "serve.trace", s->trace, shown, sizeof shown, s->trace_path,
                              sizeof s->trace_path))
      return npu_cfg_fail(job->cfg, diag, "serve.trace", "the path is too long");
    int rc = sv_trace_load(s->trace_path, &job->req, &job->nreq, diag);
    if (rc) return rc;
    for (int i = 0; i < job->nreq; i++) {
      struct sv_request *q = &job->req[i];
      if (q->prefix < 0) continue;
      if (!s->prefix_tokens)
        return npu_cfg_fail(job->cfg, diag, "serve.prefix.tokens", "the trace gives request %d (line %d) a prefix "
                            "group: its length needs serve.prefix.tokens", i + 1, i + 2);
      if (q->prompt <= s->prefix_tokens)
        return npu_cfg_fail(job->cfg, diag, "serve.prefix.tokens", "request %d (line %d) of the trace has a prompt of "
                            "%d tokens, not longer than its shared prefix of %d", i + 1, i + 2, q->prompt,
                            s->prefix_tokens);
      q->prefix_tokens = s->prefix_tokens;
    }
    return 0;
  }
  if (!s->requests)
    return npu_cfg_fail(job->cfg, diag, "serve.requests", "a serving run needs its requests: serve.requests (drawn) "
                        "or serve.trace");
  if (s->prefix_groups && !s->prefix_tokens)
    return npu_cfg_fail(job->cfg, diag, "serve.prefix.tokens", "prefix groups need the length of their shared "
                        "prefix");
  if (!s->prefix_groups && s->prefix_tokens)
    return npu_cfg_fail(job->cfg, diag, "serve.prefix.groups", "a shared prefix of %d tokens needs the number of "
                        "prefix groups", s->prefix_tokens);
  int rc = finish_dist(job, "serve.prompt", &s->prompt, diag);
  if (!rc) rc = finish_dist(job, "serve.output", &s->output, diag);
  if (rc) return rc;
  draw_requests(job);
  return 0;
}

/* Weights per device at TP tp, an MTP draft module's layer included. */
static double weights(const struct sv_job *job, int tp)
{
  double extra = job->spec.speculative == SV_SPEC_MTP ? 1.0 / job->model.layers : 0;
  return sv_weight_bytes(&job->model, tp) * (1.0 + extra);
}

/* The KV cache blocks of an engine of TP tp: HBM the engine may use less the weights and a
 * full step's activations; the longest request (context `len` tokens, request `at`) must fit
 * alone. */
static int pool_memory(struct sv_job *job, int tp, const char *tpkey, int len, int at, long *blocks,
                       struct npu_diag *diag)
{
  const struct sv_spec *s = &job->spec;
  double hbm = (double)job->sys.chip.hbm.size_bytes * s->memory_utilization;
  double w = weights(job, tp), act = sv_activation_bytes(&job->model, tp, s->max_batched_tokens);
  double kv = sv_kv_token_bytes(&job->model, tp);
  if (w >= hbm)
    return npu_cfg_fail(job->cfg, diag, tpkey, "the model's weights take %.2f GiB per device at tp %d, more than the "
                        "%.2f GiB an engine may use (serve.memory_utilization %g)", w / GIB, tp, hbm / GIB,
                        s->memory_utilization);
  double left = hbm - w - act;
  *blocks = left > 0 ? (long)floor(left / (kv * s->block_size)) : 0;
  long need = (len + s->block_size - 1) / s->block_size;
  if (need > *blocks)
    return npu_cfg_fail(job->cfg, diag, s->trace[0] ? "serve.trace" : "serve.output.max",
                        "the longest request (number %d, %d + %d tokens) needs %.2f GiB of KV cache per device at tp "
                        "%d, %.2f GiB are left after the weights (%.2f GiB) and a step's activations (%.2f GiB)",
                        at + 1, job->req[at].prompt, len - job->req[at].prompt, need * s->block_size * kv / GIB, tp,
                        left > 0 ? left / GIB : 0, w / GIB, act / GIB);
  return 0;
}

/* HBM of the engines: the weights, a full step's activations, then the KV cache in blocks,
 * which must hold the longest request alone (a prefill engine: its prompt and first token). */
static int check_memory(struct sv_job *job, struct npu_diag *diag)
{
  const struct sv_spec *s = &job->spec;
  job->weight_bytes = weights(job, s->tp);
  job->activation_bytes = sv_activation_bytes(&job->model, s->tp, s->max_batched_tokens);
  job->kv_token_bytes = sv_kv_token_bytes(&job->model, s->tp);
  job->longest = 0;
  int at = 0, maxprompt = 0, pat = 0;
  for (int i = 0; i < job->nreq; i++) {
    if (job->req[i].prompt + job->req[i].output > job->longest) {
      job->longest = job->req[i].prompt + job->req[i].output;
      at = i;
    }
    if (job->req[i].prompt > maxprompt) {
      maxprompt = job->req[i].prompt;
      pat = i;
    }
  }
  int rc = pool_memory(job, s->tp, "serve.tp", job->longest, at, &job->kv_blocks, diag);
  if (!rc && job->prefill_replicas)
    rc = pool_memory(job, job->prefill_tp, s->prefill_tp ? "serve.prefill.tp" : "serve.tp", maxprompt + 1, pat,
                     &job->prefill_kv_blocks, diag);
  if (rc) return rc;
  if (!s->chunked_prefill && maxprompt > s->max_batched_tokens)
    return npu_cfg_fail(job->cfg, diag, "serve.max_batched_tokens", "without chunked prefill a step holds whole "
                        "prompts: the longest (%d tokens) exceeds the budget of %d", maxprompt, s->max_batched_tokens);
  return 0;
}

int sv_job_load(struct sv_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  register_all(job);
  int rc = npu_cfg_load_file(job->cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(job->cfg, sets[i], diag);
  if (!rc) rc = npu_cfg_finish(job->cfg, diag);
  if (!rc) rc = arch_finish(job->cfg, &job->sys, diag);
  if (rc) return rc;
  if (!npu_cfg_section_present(job->cfg, "serve"))
    return npu_diag_set(diag, path, 0, "serve", "not a serving scenario: no serve section"), NPU_ECONFIG;
  if (!npu_cfg_section_present(job->cfg, "model"))
    return npu_diag_set(diag, path, 0, "model", "a serving scenario needs the model's section"), NPU_ECONFIG;
  rc = wl_model_finish(job->cfg, &job->model, diag);
  job->devices = wl_system_devices(&job->sys);
  if (!rc) rc = check_layout(job, diag);
  if (!rc) rc = check_engine(job, diag);
  if (!rc) rc = build_workload(job, diag);
  if (!rc) rc = check_memory(job, diag);
  if (!rc) job->ngraph = job->spec.graph ? sv_graph_sizes(job->spec.max_num_seqs, job->graph_sizes) : 0;
  return rc;
}

void sv_job_release(struct sv_job *job)
{
  free(job->req);
  if (job->cfg) npu_cfg_destroy(job->cfg);
  memset(job, 0, sizeof *job);
}
