/*
 * summary.c - an RL iteration's results as text, summary.json and a CSV row.
 *
 * JSON keys and CSV columns are a contract (scripts and sweeps rely on them): .iteration_time_s
 * and .phases[] with .name and .time_s; names carry their units, fractions are fractions, and
 * CSV columns keep their order (new ones are added at the end).
 */
#include "rl/rl.h"

#include <stdio.h>
#include <string.h>

#include "common/json.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *const dist_names[] = {"fixed", "uniform", "lognormal", "histogram"};

static double phase_s(const struct rl_result *r, const char *name)
{
  double t = 0;
  for (int i = 0; i < r->nphases; i++)
    if (!strcmp(r->phase[i].name, name)) t += r->phase[i].time_s;
  return t;
}

static double phase_mfu(const struct rl_result *r, const char *name)
{
  for (int i = 0; i < r->nphases; i++)
    if (!strcmp(r->phase[i].name, name)) return r->phase[i].mfu;
  return 0;
}

static const char *pool_name(const struct rl_job *job, int pool)
{
  if (job->spec.placement == RL_PLACE_COLOCATED) return "all";
  return pool == RL_POOL_ROLLOUT ? "rollout" : "train";
}

void rl_summary_text(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out)
{
  const struct rl_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  const struct wl_plan *p = &job->plan;
  npu_buf_printf(out, "%s RL iteration: %s (%.1fB parameters) on %d x %s, %s, %s\n", s->algorithm ? "PPO" : "GRPO",
                 m->title[0] ? m->title : m->name, wl_model_params(m) / 1e9, job->devices, job->sys.chip.name,
                 rl_placement_name(s->placement), s->mode == RL_MODE_ASYNC ? "one-step async" : "sync");
  char dist[64];
  if (s->response.distribution == RL_DIST_HISTOGRAM)
    snprintf(dist, sizeof dist, "a histogram of %d bins", s->response.hist_n);
  else
    snprintf(dist, sizeof dist, "%s %s %d", dist_names[s->response.distribution],
             s->response.distribution == RL_DIST_LOGNORMAL ? "median" : "mean", s->response.mean);
  npu_buf_printf(out, "  batch          %d prompts x %d responses, prompt %d tokens, responses %s, max %d (seed %d): "
                      "longest %.0f, mean %.1f\n",
                 s->prompts, s->group_size, s->prompt_len, dist, s->response.max, s->seed, r->rollout.longest,
                 r->rollout.mean_len);
  npu_buf_printf(out, "  rollout pool   %d devices (ranks %d-%d): %d engines of TP%d%s, up to %d sequences each, KV "
                      "cache %.0f tokens per engine\n",
                 job->rollout_devices, job->rollout_first, job->rollout_first + job->rollout_devices - 1,
                 job->engines, s->rollout.tp, s->rollout.expert_parallel ? " (EP)" : "", r->rollout.max_batch,
                 r->rollout.kv_capacity_tokens);
  npu_buf_printf(out, "  training pool  %d devices (ranks %d-%d): TP%d PP%d DP%d EP%d, %d step(s) of %d packed "
                      "sequences of %d tokens\n",
                 job->train_devices, job->train_first, job->train_first + job->train_devices - 1, p->tp, p->pp, p->dp,
                 p->ep, r->train_steps, r->train_global_batch, job->train_seq_len);
  npu_buf_printf(out, "  iteration      %.4g s\n", r->iteration_s);
  npu_buf_printf(out, "  phases         %-17s %-8s %10s %10s %7s\n", "name", "pool", "start s", "time s", "MFU");
  for (int i = 0; i < r->nphases; i++) {
    const struct rl_phase *ph = &r->phase[i];
    npu_buf_printf(out, "                 %-17s %-8s %10.4g %10.4g %6.1f%%\n", ph->name, pool_name(job, ph->pool),
                   ph->start_s, ph->time_s, 100 * ph->mfu);
  }
  npu_buf_printf(out, "  rollout        prefill %.4g s, decode %.4g s (%ld steps, mean batch %.1f) on the slowest "
                      "engine; drain after its last admission %.4g s; engines idle waiting for it %.4g s on average\n",
                 r->rollout.prefill_s, r->rollout.decode_s, r->rollout.decode_steps, r->rollout.mean_batch,
                 r->rollout.tail_s, r->rollout.idle_s);
  npu_buf_printf(out, "  throughput     %.6g generated tokens/s, %.6g trained tokens/s\n", r->generated_tokens_per_s,
                 r->trained_tokens_per_s);
  npu_buf_printf(out, "  utilisation    rollout pool %.1f%%, training pool %.1f%%\n", 100 * r->util_rollout,
                 100 * r->util_train);
  npu_buf_printf(out, "  training step  %.4g s, MFU %.1f%%, memory %.2f GiB per device%s; %s\n", r->train_step_s,
                 100 * r->train_mfu, r->train_memory_bytes / GIB, r->train_oom ? " OUT OF MEMORY" : "",
                 r->train_bottleneck);
  npu_buf_printf(out, "  weight sync    %.4g GB moved\n", r->sync_bytes / 1e9);
  npu_buf_printf(out, "  bottleneck     %s\n", r->bottleneck);
}

static void num(struct npu_json *j, const char *k, double v)
{
  npu_json_key(j, k);
  npu_json_number(j, v);
}

void rl_summary_json(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out)
{
  const struct rl_spec *s = &job->spec;
  struct npu_json j;
  npu_json_init(&j, out);
  npu_json_object_begin(&j);
  npu_json_key(&j, "scenario");
  npu_json_string(&j, job->path);
  npu_json_key(&j, "kind");
  npu_json_string(&j, "rl");
  npu_json_key(&j, "model");
  npu_json_string(&j, job->model.name);
  npu_json_key(&j, "system");
  npu_json_string(&j, job->sys.chip.name);
  npu_json_key(&j, "devices");
  npu_json_int(&j, job->devices);
  npu_json_key(&j, "algorithm");
  npu_json_string(&j, rl_algo_name(s->algorithm));
  npu_json_key(&j, "placement");
  npu_json_string(&j, rl_placement_name(s->placement));
  npu_json_key(&j, "mode");
  npu_json_string(&j, rl_mode_name(s->mode));
  npu_json_key(&j, "seed");
  npu_json_int(&j, s->seed);
  npu_json_key(&j, "prompts");
  npu_json_int(&j, s->prompts);
  npu_json_key(&j, "group_size");
  npu_json_int(&j, s->group_size);
  npu_json_key(&j, "prompt_len");
  npu_json_int(&j, s->prompt_len);
  num(&j, "iteration_time_s", r->iteration_s);
  npu_json_key(&j, "phases");
  npu_json_array_begin(&j);
  for (int i = 0; i < r->nphases; i++) {
    const struct rl_phase *p = &r->phase[i];
    npu_json_object_begin(&j);
    npu_json_key(&j, "name");
    npu_json_string(&j, p->name);
    npu_json_key(&j, "pool");
    npu_json_string(&j, pool_name(job, p->pool));
    num(&j, "start_s", p->start_s);
    num(&j, "time_s", p->time_s);
    num(&j, "flops", p->flops);
    num(&j, "mfu", p->mfu);
    num(&j, "bytes", p->bytes);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  npu_json_key(&j, "pools");
  npu_json_object_begin(&j);
  npu_json_key(&j, "rollout");
  npu_json_object_begin(&j);
  npu_json_key(&j, "devices");
  npu_json_int(&j, job->rollout_devices);
  npu_json_key(&j, "first_rank");
  npu_json_int(&j, job->rollout_first);
  npu_json_key(&j, "engines");
  npu_json_int(&j, job->engines);
  npu_json_key(&j, "tp");
  npu_json_int(&j, s->rollout.tp);
  num(&j, "utilisation", r->util_rollout);
  num(&j, "weights_bytes_per_device", r->weights_bytes_rollout);
  npu_json_object_end(&j);
  npu_json_key(&j, "train");
  npu_json_object_begin(&j);
  npu_json_key(&j, "devices");
  npu_json_int(&j, job->train_devices);
  npu_json_key(&j, "first_rank");
  npu_json_int(&j, job->train_first);
  npu_json_key(&j, "tp");
  npu_json_int(&j, job->plan.tp);
  npu_json_key(&j, "pp");
  npu_json_int(&j, job->plan.pp);
  npu_json_key(&j, "dp");
  npu_json_int(&j, job->plan.dp);
  npu_json_key(&j, "ep");
  npu_json_int(&j, job->plan.ep);
  num(&j, "utilisation", r->util_train);
  npu_json_object_end(&j);
  npu_json_object_end(&j);
  npu_json_key(&j, "rollout");
  npu_json_object_begin(&j);
  num(&j, "time_s", r->rollout.time_s);
  num(&j, "prefill_s", r->rollout.prefill_s);
  num(&j, "decode_s", r->rollout.decode_s);
  num(&j, "tail_s", r->rollout.tail_s);
  num(&j, "straggler_idle_s", r->rollout.idle_s);
  num(&j, "mean_batch", r->rollout.mean_batch);
  npu_json_key(&j, "max_batch");
  npu_json_int(&j, r->rollout.max_batch);
  num(&j, "kv_capacity_tokens", r->rollout.kv_capacity_tokens);
  num(&j, "longest_response", r->rollout.longest);
  num(&j, "mean_response", r->rollout.mean_len);
  num(&j, "generated_tokens", r->rollout.generated_tokens);
  npu_json_key(&j, "decode_steps");
  npu_json_int(&j, r->rollout.decode_steps);
  npu_json_object_end(&j);
  npu_json_key(&j, "train");
  npu_json_object_begin(&j);
  num(&j, "step_time_s", r->train_step_s);
  npu_json_key(&j, "steps");
  npu_json_int(&j, r->train_steps);
  npu_json_key(&j, "global_batch");
  npu_json_int(&j, r->train_global_batch);
  npu_json_key(&j, "seq_len");
  npu_json_int(&j, job->train_seq_len);
  num(&j, "mfu", r->train_mfu);
  num(&j, "memory_peak_bytes", r->train_memory_bytes);
  npu_json_key(&j, "oom");
  npu_json_bool(&j, r->train_oom);
  npu_json_key(&j, "bottleneck");
  npu_json_string(&j, r->train_bottleneck);
  npu_json_object_end(&j);
  num(&j, "weight_sync_bytes", r->sync_bytes);
  num(&j, "trained_tokens", r->trained_tokens);
  num(&j, "generated_tokens_per_s", r->generated_tokens_per_s);
  num(&j, "trained_tokens_per_s", r->trained_tokens_per_s);
  num(&j, "peak_flops_per_s", r->peak_flops_per_s);
  npu_json_key(&j, "bottleneck");
  npu_json_string(&j, r->bottleneck);
  npu_json_object_end(&j);
  npu_json_finish(&j);
}

/* CSV columns: name, format, value. */
#define RL_CSV_COLS(XX)                                                                    \
  XX("scenario", "%s", job->path)                                                          \
  XX("model", "%s", job->model.name)                                                       \
  XX("system", "%s", job->sys.chip.name)                                                   \
  XX("devices", "%d", job->devices)                                                        \
  XX("algorithm", "%s", rl_algo_name(s->algorithm))                                        \
  XX("placement", "%s", rl_placement_name(s->placement))                                   \
  XX("mode", "%s", rl_mode_name(s->mode))                                                  \
  XX("rollout_devices", "%d", job->rollout_devices)                                        \
  XX("train_devices", "%d", job->train_devices)                                            \
  XX("rollout_tp", "%d", s->rollout.tp)                                                    \
  XX("train_tp", "%d", job->plan.tp)                                                       \
  XX("train_pp", "%d", job->plan.pp)                                                       \
  XX("sequences", "%d", job->sequences)                                                    \
  XX("seed", "%d", s->seed)                                                                \
  XX("iteration_time_s", "%.9g", r->iteration_s)                                           \
  XX("rollout_s", "%.9g", phase_s(r, "rollout"))                                           \
  XX("inference_s", "%.9g", phase_s(r, "reward") + phase_s(r, "reference") +               \
                                phase_s(r, "critic_inference") + phase_s(r, "old_logprob")) \
  XX("train_s", "%.9g", phase_s(r, "actor_train") + phase_s(r, "critic_train"))            \
  XX("weight_sync_s", "%.9g", phase_s(r, "weight_sync"))                                   \
  XX("offload_s", "%.9g", phase_s(r, "reload") + phase_s(r, "offload"))                    \
  XX("straggler_idle_s", "%.9g", r->rollout.idle_s)                                        \
  XX("rollout_tail_s", "%.9g", r->rollout.tail_s)                                          \
  XX("generated_tokens_per_s", "%.9g", r->generated_tokens_per_s)                          \
  XX("trained_tokens_per_s", "%.9g", r->trained_tokens_per_s)                              \
  XX("util_rollout", "%.6f", r->util_rollout)                                              \
  XX("util_train", "%.6f", r->util_train)                                                  \
  XX("rollout_mfu", "%.6f", phase_mfu(r, "rollout"))                                       \
  XX("train_mfu", "%.6f", r->train_mfu)                                                    \
  XX("train_oom", "%d", r->train_oom ? 1 : 0)                                              \
  XX("weight_sync_bytes", "%.0f", r->sync_bytes)

void rl_summary_csv_header(struct npu_buf *out)
{
  const char *sep = "";
#define HDR(name, fmt, expr)              \
  npu_buf_printf(out, "%s%s", sep, name); \
  sep = ",";
  RL_CSV_COLS(HDR)
#undef HDR
  npu_buf_puts(out, ",bottleneck\n");
}

void rl_summary_csv_row(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out)
{
  const struct rl_spec *s = &job->spec;
  const char *sep = "";
  char cell[1024];
#define ROW(name, fmt, expr)                  \
  snprintf(cell, sizeof cell, fmt, expr);     \
  npu_buf_puts(out, sep);                     \
  npu_csv_field(out, cell);                           \
  sep = ",";
  RL_CSV_COLS(ROW)
#undef ROW
  npu_buf_puts(out, ",");
  npu_csv_field(out, r->bottleneck);
  npu_buf_puts(out, "\n");
}
