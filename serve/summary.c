/*
 * summary.c - a serving run's results as text, summary.json and a CSV row.
 *
 * Columns are a contract (sweeps, scripts): their order is kept, new ones go at the end. The
 * latency columns are families "<latency>_<stat>_s" over mean, p50, p90, p99 and max, with the
 * names vLLM's benchmark_serving prints (ttft, tpot, itl, e2e). summary.json holds every column
 * at its top level, then where the engines' time went and the timeline.
 */
#include "serve/serve.h"

#include <stdio.h>
#include <string.h>

#include "common/json.h"
#include "report/columns.h"
#include "report/html.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const kind_names[] = {"prefill", "decode", "mixed"};

/* ------------------------------------------------------------------ columns */

#define J(ctx) (((const struct sv_report *)(ctx))->job)
#define R(ctx) (((const struct sv_report *)(ctx))->res)

static const char *stat_name(int i)
{
  static const char *const n[] = {"mean", "p50", "p90", "p99", "max"};
  return n[i];
}

static const char *stat_desc(int i)
{
  static const char *const n[] = {"mean", "median", "90th percentile", "99th percentile", "maximum"};
  return n[i];
}

static double stat(const struct sv_latency *l, int i)
{
  const double v[] = {l->mean, l->p50, l->p90, l->p99, l->max};
  return v[i];
}

static const char *c_scenario(const void *x, int i) { (void)i; return J(x)->path; }
static const char *c_model(const void *x, int i) { (void)i; return J(x)->model.name; }
static const char *c_system(const void *x, int i) { (void)i; return J(x)->sys.chip.name; }
static long long c_devices(const void *x, int i) { (void)i; return J(x)->devices; }
static long long c_tp(const void *x, int i) { (void)i; return J(x)->spec.tp; }
static long long c_replicas(const void *x, int i) { (void)i; return J(x)->replicas; }
static const char *c_router(const void *x, int i) { (void)i; return sv_router_name(J(x)->spec.router); }
static long long c_requests(const void *x, int i) { (void)i; return J(x)->nreq; }
static double c_rate(const void *x, int i) { (void)i; return J(x)->spec.trace[0] ? 0 : J(x)->spec.rate; }
static long long c_seed(const void *x, int i) { (void)i; return J(x)->spec.seed; }
static double c_duration(const void *x, int i) { (void)i; return R(x)->duration_s; }
static double c_req_rate(const void *x, int i) { (void)i; return R(x)->request_rate; }
static double c_in_tps(const void *x, int i) { (void)i; return R(x)->input_tokens_per_s; }
static double c_out_tps(const void *x, int i) { (void)i; return R(x)->output_tokens_per_s; }
static double c_out_tps_dev(const void *x, int i) { (void)i; return R(x)->output_tokens_per_s_per_device; }
static double c_goodput(const void *x, int i) { (void)i; return R(x)->goodput; }
static double c_slo(const void *x, int i) { (void)i; return R(x)->slo_attainment; }
static double c_ttft(const void *x, int i) { return stat(&R(x)->ttft, i); }
static double c_tpot(const void *x, int i) { return stat(&R(x)->tpot, i); }
static double c_itl(const void *x, int i) { return stat(&R(x)->itl, i); }
static double c_e2e(const void *x, int i) { return stat(&R(x)->e2e, i); }
static double c_kv_mean(const void *x, int i) { (void)i; return R(x)->kv_mean; }
static double c_kv_peak(const void *x, int i) { (void)i; return R(x)->kv_peak; }
static double c_batch(const void *x, int i) { (void)i; return R(x)->mean_batch; }
static long long c_preempt(const void *x, int i) { (void)i; return R(x)->preemptions; }
static double c_busy(const void *x, int i) { (void)i; return R(x)->busy; }
static double c_mfu(const void *x, int i) { (void)i; return R(x)->mfu; }
static const char *c_bottleneck(const void *x, int i) { (void)i; return R(x)->bottleneck; }
static long long c_pre_replicas(const void *x, int i) { (void)i; return J(x)->prefill_replicas; }
static long long c_pre_tp(const void *x, int i) { (void)i; return J(x)->prefill_tp; }
static double c_kv_xfer(const void *x, int i) { (void)i; return R(x)->kv_transfer_mean_s; }
static double c_spec(const void *x, int i) { (void)i; return R(x)->spec_accepted_per_step; }

static const struct rpt_column columns[] = {
    {"scenario", RPT_STRING, "text", "the scenario file (or the sweep point's name)", .text = c_scenario},
    {"model", RPT_STRING, "text", "the model's name", .text = c_model},
    {"system", RPT_STRING, "text", "the chip's name", .text = c_system},
    {"devices", RPT_INT, "", "devices of the system", .integer = c_devices},
    {"tp", RPT_INT, "", "tensor-parallel size of one engine", .integer = c_tp},
    {"replicas", RPT_INT, "", "engines behind the router", .integer = c_replicas},
    {"router", RPT_STRING, "text", "round_robin, least_loaded or prefix", .text = c_router},
    {"requests", RPT_INT, "", "requests served", .integer = c_requests},
    {"rate", RPT_REAL, "requests/s", "arrival rate asked for (0: all at once, or a trace)", .real = c_rate},
    {"seed", RPT_INT, "", "seed of arrivals and lengths", .integer = c_seed},
    {"duration_s", RPT_REAL, "s", "first arrival to last token", .real = c_duration},
    {"request_throughput", RPT_REAL, "requests/s", "requests completed per second of duration", .real = c_req_rate},
    {"input_tokens_per_s", RPT_REAL, "tokens/s", "prompt tokens per second of duration", .real = c_in_tps},
    {"output_tokens_per_s", RPT_REAL, "tokens/s", "generated tokens per second of duration", .real = c_out_tps},
    {"output_tokens_per_s_per_device", RPT_REAL, "tokens/s", "generated tokens per second per device of the replicas",
     .real = c_out_tps_dev},
    {"goodput", RPT_REAL, "requests/s", "requests meeting every serve.slo.* per second of duration (all, without "
     "SLOs)", .real = c_goodput},
    {"slo_attainment", RPT_REAL, "fraction", "share of requests meeting every serve.slo.*", .real = c_slo},
    {"ttft_%s_s", RPT_REAL, "s", "time to first token, %s over requests", .real = c_ttft, .count = 5,
     .index_name = stat_name, .index_desc = stat_desc},
    {"tpot_%s_s", RPT_REAL, "s", "time per output token after the first, %s over requests of 2+ tokens",
     .real = c_tpot, .count = 5, .index_name = stat_name, .index_desc = stat_desc},
    {"itl_%s_s", RPT_REAL, "s", "inter-token latency, %s over every gap between two tokens of a request",
     .real = c_itl, .count = 5, .index_name = stat_name, .index_desc = stat_desc},
    {"e2e_%s_s", RPT_REAL, "s", "end-to-end latency (arrival to last token), %s over requests", .real = c_e2e,
     .count = 5, .index_name = stat_name, .index_desc = stat_desc},
    {"kv_cache_mean", RPT_REAL, "fraction", "KV cache in use, mean over replicas and the duration", .real = c_kv_mean},
    {"kv_cache_peak", RPT_REAL, "fraction", "KV cache in use, the most on one replica", .real = c_kv_peak},
    {"mean_batch", RPT_REAL, "", "sequences scheduled per engine step", .real = c_batch},
    {"preemptions", RPT_INT, "", "sequences evicted from a full KV cache (recomputed later)", .integer = c_preempt},
    {"busy", RPT_REAL, "fraction", "share of replica time spent stepping", .real = c_busy},
    {"mfu", RPT_REAL, "fraction", "model FLOPs over duration x devices x bf16 peak", .real = c_mfu},
    {"bottleneck", RPT_STRING, "text", "where the engines' time goes, and what held requests back", .text = c_bottleneck},
    {"prefill_replicas", RPT_INT, "", "prefill-only engines (disaggregated; 0: colocated, and replicas and tp are "
     "the decode engines' otherwise)", .integer = c_pre_replicas},
    {"prefill_tp", RPT_INT, "", "tensor-parallel size of a prefill engine (0: colocated)", .integer = c_pre_tp},
    {"kv_transfer_mean_s", RPT_REAL, "s", "a prompt's KV cache from its prefill engine to a decode engine, mean over "
     "requests (0: colocated)", .real = c_kv_xfer},
    {"spec_accepted_per_step", RPT_REAL, "tokens", "speculative decoding: draft tokens accepted per sequence and "
     "verifying step (0: none)", .real = c_spec},
    {NULL},
};

#undef J
#undef R

const struct rpt_column *sv_summary_columns(void)
{
  return columns;
}

/* ------------------------------------------------------------------ text */

static void latency_line(struct npu_buf *out, const char *name, const struct sv_latency *l)
{
  bool sec = l->max >= 10.0; /* end-to-end latencies of long outputs read better in seconds */
  double k = sec ? 1.0 : 1e3;
  npu_buf_printf(out, "  %-14s mean %8.*f  p50 %8.*f  p90 %8.*f  p99 %8.*f  max %8.*f %s\n", name, sec ? 2 : 1,
                 k * l->mean, sec ? 2 : 1, k * l->p50, sec ? 2 : 1, k * l->p90, sec ? 2 : 1, k * l->p99, sec ? 2 : 1,
                 k * l->max, sec ? "s" : "ms");
}

void sv_summary_text(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out)
{
  const struct sv_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  npu_buf_printf(out, "serving: %s (%.1fB parameters) on %d x %s: ", m->title[0] ? m->title : m->name,
                 wl_model_params(m) / 1e9, job->devices, job->sys.chip.name);
  if (job->prefill_replicas)
    npu_buf_printf(out, "%d prefill engine%s of TP%d, ", job->prefill_replicas, job->prefill_replicas == 1 ? "" : "s",
                   job->prefill_tp);
  npu_buf_printf(out, "%d %sengine%s of TP%d%s, %s router\n", job->replicas, job->prefill_replicas ? "decode " : "",
                 job->replicas == 1 ? "" : "s", s->tp, s->expert_parallel ? " (EP)" : "", sv_router_name(s->router));
  if (s->trace[0]) {
    npu_buf_printf(out, "  workload       %d requests from %s\n", job->nreq, s->trace);
  } else {
    char p[64], o[64];
    sv_dist_describe(&s->prompt, p, sizeof p);
    sv_dist_describe(&s->output, o, sizeof o);
    if (s->rate > 0)
      npu_buf_printf(out, "  workload       %d requests at %g/s (gamma, burstiness %g), ", job->nreq, s->rate,
                     s->burstiness);
    else
      npu_buf_printf(out, "  workload       %d requests at once, ", job->nreq);
    npu_buf_printf(out, "prompt %s (max %d), output %s (max %d)", p, s->prompt.max, o, s->output.max);
    if (s->prefix_groups)
      npu_buf_printf(out, ", %d shared prefixes of %d tokens", s->prefix_groups, s->prefix_tokens);
    npu_buf_printf(out, " (seed %d)\n", s->seed);
  }
  npu_buf_printf(out, "  engine         max %d sequences, %d tokens per step, %s prefill, %s preemption, prefix "
                      "caching %s, %d graph sizes\n",
                 s->max_num_seqs, s->max_batched_tokens, s->chunked_prefill ? "chunked" : "whole-prompt",
                 sv_preemption_name(s->preemption), s->prefix_caching ? "on" : "off", job->ngraph);
  if (s->speculative != SV_SPEC_NONE)
    npu_buf_printf(out, "  speculative    %s, %d draft tokens per step, acceptance %g: %.3g accepted per verifying "
                        "step (%.0f of %.0f drafts)\n",
                   sv_speculative_name(s->speculative), s->spec_tokens, s->spec_acceptance, r->spec_accepted_per_step,
                   r->spec_accepted_tokens, r->spec_draft_tokens);
  npu_buf_printf(out, "  memory         weights %.2f GiB, activations %.2f GiB, KV cache %ld blocks of %d = %ld "
                      "tokens per engine\n",
                 job->weight_bytes / GIB, job->activation_bytes / GIB, job->kv_blocks, s->block_size,
                 job->kv_blocks * s->block_size);
  if (job->prefill_replicas)
    npu_buf_printf(out, "  KV transfer    %.3g ms per request on average (%.3g GB in all), %.3g us + bytes / %.4g GB/s "
                        "per rank pair, prefill engine %ld KV cache blocks\n",
                   1e3 * r->kv_transfer_mean_s, r->kv_transfer_bytes / 1e9, 1e6 * r->kv_link_latency_s,
                   r->kv_link_bytes_per_s / 1e9, job->prefill_kv_blocks);
  npu_buf_printf(out, "  duration       %.4g s\n", r->duration_s);
  npu_buf_printf(out, "  throughput     %.4g requests/s, %.6g input tokens/s, %.6g output tokens/s (%.4g per "
                      "device)\n",
                 r->request_rate, r->input_tokens_per_s, r->output_tokens_per_s, r->output_tokens_per_s_per_device);
  if (s->slo_ttft_s || s->slo_tpot_s || s->slo_e2e_s)
    npu_buf_printf(out, "  goodput        %.4g requests/s, %.1f%% of requests meet the SLOs (TTFT %.1f%%, TPOT "
                        "%.1f%%, E2E %.1f%%)\n",
                   r->goodput, 100 * r->slo_attainment, 100 * r->slo_met[0], 100 * r->slo_met[1], 100 * r->slo_met[2]);
  latency_line(out, "TTFT", &r->ttft);
  latency_line(out, "TPOT", &r->tpot);
  latency_line(out, "ITL", &r->itl);
  latency_line(out, "E2E", &r->e2e);
  npu_buf_printf(out, "  batches        %ld steps, mean %.1f sequences (peak %d), engines busy %.1f%%\n", r->steps,
                 r->mean_batch, r->running_peak, 100 * r->busy);
  if (job->prefill_replicas)
    npu_buf_printf(out, "  pools          prefill engines busy %.1f%%, decode engines busy %.1f%%\n",
                   100 * r->prefill_busy, 100 * r->decode_busy);
  npu_buf_printf(out, "  KV cache       mean %.1f%%, peak %.1f%%, %ld preemptions (%.0f tokens recomputed), %.0f "
                      "prompt tokens from the prefix cache\n",
                 100 * r->kv_mean, 100 * r->kv_peak, r->preemptions, r->recomputed_tokens, r->cached_tokens);
  double busy = r->kind_s[0] + r->kind_s[1] + r->kind_s[2];
  for (int k = 0; k < SV_STEP_KINDS; k++) {
    if (r->kind_s[k] <= 0) continue;
    npu_buf_printf(out, "  %-7s steps  %5.1f%% of engine time:", kind_names[k], busy > 0 ? 100 * r->kind_s[k] / busy : 0);
    for (int p = 0; p < SV_PART_COUNT; p++)
      if (p != SV_PART_DRAFT || r->kind_parts_s[k][p] > 0) /* drafts only with speculative decoding */
        npu_buf_printf(out, " %s %.1f%%", sv_part_name(p), 100 * r->kind_parts_s[k][p] / r->kind_s[k]);
    npu_buf_printf(out, "\n");
  }
  npu_buf_printf(out, "  MFU            %.1f%%\n", 100 * r->mfu);
  npu_buf_printf(out, "  bottleneck     %s\n", r->bottleneck);
}

/* ------------------------------------------------------------------ HTML */

/* One latency's row of the page's table: mean and percentiles in ms (s above 10 s). */
static void latency_row(struct npu_buf *out, const char *name, const struct sv_latency *l)
{
  bool sec = l->max >= 10.0;
  double k = sec ? 1.0 : 1e3;
  char c[5][32];
  const double v[5] = {l->mean, l->p50, l->p90, l->p99, l->max};
  for (int i = 0; i < 5; i++) snprintf(c[i], sizeof c[i], "%.*f %s", sec ? 2 : 1, k * v[i], sec ? "s" : "ms");
  const char *cells[] = {name, c[0], c[1], c[2], c[3], c[4]};
  rpt_html_row(out, cells, 6);
}

void sv_summary_html(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out)
{
  const struct sv_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  char title[256], deploy[256], work[768], dur[64], tput[160], good[160], kv[160], mfu[32];
  snprintf(title, sizeof title, "Serving %s on %d x %s", m->title[0] ? m->title : m->name, job->devices,
           job->sys.chip.name);
  if (job->prefill_replicas)
    snprintf(deploy, sizeof deploy, "%d prefill engine%s of TP%d, %d decode engine%s of TP%d, %s router",
             job->prefill_replicas, job->prefill_replicas == 1 ? "" : "s", job->prefill_tp, job->replicas,
             job->replicas == 1 ? "" : "s", s->tp, sv_router_name(s->router));
  else
    snprintf(deploy, sizeof deploy, "%d engine%s of TP%d%s, %s router", job->replicas, job->replicas == 1 ? "" : "s",
             s->tp, s->expert_parallel ? " (EP)" : "", sv_router_name(s->router));
  if (s->trace[0]) snprintf(work, sizeof work, "%d requests from %s", job->nreq, s->trace);
  else if (s->rate > 0) snprintf(work, sizeof work, "%d requests at %g/s (seed %d)", job->nreq, s->rate, s->seed);
  else snprintf(work, sizeof work, "%d requests at once (seed %d)", job->nreq, s->seed);
  snprintf(dur, sizeof dur, "%.4g s", r->duration_s);
  snprintf(tput, sizeof tput, "%.4g requests/s, %.0f input and %.0f output tokens/s (%.0f output per device)",
           r->request_rate, r->input_tokens_per_s, r->output_tokens_per_s, r->output_tokens_per_s_per_device);
  if (s->slo_ttft_s || s->slo_tpot_s || s->slo_e2e_s)
    snprintf(good, sizeof good, "%.4g requests/s: %.1f%% of requests meet the SLOs", r->goodput,
             100 * r->slo_attainment);
  else
    snprintf(good, sizeof good, "no SLOs given");
  snprintf(kv, sizeof kv, "mean %.1f%%, peak %.1f%%, %ld preemptions", 100 * r->kv_mean, 100 * r->kv_peak,
           r->preemptions);
  snprintf(mfu, sizeof mfu, "%.1f%%", 100 * r->mfu);
  rpt_html_begin(out, title);
  const char *names[] = {"scenario", "deployment", "workload", "duration", "throughput", "goodput", "KV cache", "MFU",
                         "bottleneck"};
  const char *values[] = {job->path, deploy, work, dur, tput, good, kv, mfu, r->bottleneck};
  rpt_html_facts(out, names, values, 9);
  rpt_html_heading(out, "Latency per request");
  static const char *const head[] = {"", "mean", "p50", "p90", "p99", "max"};
  rpt_html_table_begin(out, head, 6);
  latency_row(out, "time to first token", &r->ttft);
  latency_row(out, "time per output token", &r->tpot);
  latency_row(out, "inter-token latency", &r->itl);
  latency_row(out, "end to end", &r->e2e);
  rpt_html_table_end(out);
  rpt_html_heading(out, "Engine time by kind of step");
  rpt_html_para(out, "Where the engines' busy time goes (seconds summed over the engines): each kind of step split "
                     "into its parts. Hover a segment for its value.");
  const char *series[SV_PART_COUNT], *rows[SV_STEP_KINDS];
  double v[SV_STEP_KINDS * SV_PART_COUNT];
  int n = 0;
  for (int p = 0; p < SV_PART_COUNT; p++) series[p] = sv_part_name(p);
  for (int k = 0; k < SV_STEP_KINDS; k++) {
    if (r->kind_s[k] <= 0) continue;
    rows[n] = kind_names[k];
    for (int p = 0; p < SV_PART_COUNT; p++) v[n * SV_PART_COUNT + p] = r->kind_parts_s[k][p];
    n++;
  }
  struct rpt_html_chart ch = {series, SV_PART_COUNT, rows, n, v, 0, "s", 1, 0, NULL};
  rpt_html_bars(out, &ch);
  rpt_html_end(out);
}

/* ------------------------------------------------------------------ JSON */

static void num(struct npu_json *j, const char *k, double v)
{
  npu_json_key(j, k);
  npu_json_number(j, v);
}

static void parts(struct npu_json *j, const char *key, const double *p)
{
  npu_json_key(j, key);
  npu_json_object_begin(j);
  for (int i = 0; i < SV_PART_COUNT; i++) num(j, sv_part_name(i), p[i]);
  npu_json_object_end(j);
}

void sv_summary_json(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out)
{
  struct npu_json j;
  struct sv_report x = {job, r};
  npu_json_init(&j, out);
  npu_json_object_begin(&j);
  npu_json_key(&j, "kind");
  npu_json_string(&j, "serve");
  rpt_columns_json(columns, &x, &j);
  npu_json_key(&j, "engine");
  npu_json_object_begin(&j);
  npu_json_key(&j, "kv_blocks");
  npu_json_int(&j, job->kv_blocks);
  npu_json_key(&j, "block_size");
  npu_json_int(&j, job->spec.block_size);
  num(&j, "weights_bytes_per_device", job->weight_bytes);
  num(&j, "activation_bytes_per_device", job->activation_bytes);
  num(&j, "kv_bytes_per_token_per_device", job->kv_token_bytes);
  npu_json_key(&j, "steps");
  npu_json_int(&j, r->steps);
  npu_json_key(&j, "running_peak");
  npu_json_int(&j, r->running_peak);
  num(&j, "recomputed_tokens", r->recomputed_tokens);
  num(&j, "cached_prompt_tokens", r->cached_tokens);
  num(&j, "draft_tokens", r->spec_draft_tokens);
  num(&j, "accepted_draft_tokens", r->spec_accepted_tokens);
  num(&j, "input_tokens", r->input_tokens);
  num(&j, "output_tokens", r->output_tokens);
  num(&j, "model_flops", r->flops);
  num(&j, "peak_flops_per_s", r->peak_flops_per_s);
  npu_json_object_end(&j);
  if (job->prefill_replicas) {
    npu_json_key(&j, "disaggregation");
    npu_json_object_begin(&j);
    npu_json_key(&j, "prefill_kv_blocks");
    npu_json_int(&j, job->prefill_kv_blocks);
    num(&j, "prefill_busy", r->prefill_busy);
    num(&j, "decode_busy", r->decode_busy);
    num(&j, "kv_transfer_bytes", r->kv_transfer_bytes);
    num(&j, "kv_link_latency_s", r->kv_link_latency_s);
    num(&j, "kv_link_bytes_per_s", r->kv_link_bytes_per_s);
    npu_json_object_end(&j);
  }
  parts(&j, "busy_parts_s", r->parts_s);
  npu_json_key(&j, "steps_by_kind");
  npu_json_object_begin(&j);
  for (int k = 0; k < SV_STEP_KINDS; k++) {
    npu_json_key(&j, kind_names[k]);
    npu_json_object_begin(&j);
    num(&j, "time_s", r->kind_s[k]);
    parts(&j, "parts_s", r->kind_parts_s[k]);
    npu_json_object_end(&j);
  }
  npu_json_object_end(&j);
  npu_json_key(&j, "timeline");
  npu_json_object_begin(&j);
  num(&j, "bin_s", r->timeline_width_s);
  static const char *const fields[] = {"running", "waiting", "kv_cache", "busy", "preemptions", "output_tokens",
                                       "arrivals"};
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
    npu_json_key(&j, fields[f]);
    npu_json_array_begin(&j);
    for (int b = 0; b < r->timeline_n; b++) {
      const struct sv_timeline_bin *t = &r->timeline[b];
      const double v[] = {t->running, t->waiting, t->kv_used, t->busy, t->preemptions, t->tokens, t->arrivals};
      npu_json_number(&j, v[f]);
    }
    npu_json_array_end(&j);
  }
  npu_json_object_end(&j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
}
