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
#include "report/columns.h"
#include "report/html.h"

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

void rl_summary_html(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out)
{
  const struct rl_spec *s = &job->spec;
  const struct wl_model *m = &job->model;
  char title[256], place[128], iter[64], tput[128], util[96], train[384];
  snprintf(title, sizeof title, "%s RL iteration: %s on %d x %s", s->algorithm ? "PPO" : "GRPO",
           m->title[0] ? m->title : m->name, job->devices, job->sys.chip.name);
  snprintf(place, sizeof place, "%s, %s; %d engines of TP%d", rl_placement_name(s->placement),
           s->mode == RL_MODE_ASYNC ? "one-step async" : "sync", job->engines, s->rollout.tp);
  snprintf(iter, sizeof iter, "%.4g s", r->iteration_s);
  snprintf(tput, sizeof tput, "%.0f generated tokens/s, %.0f trained tokens/s", r->generated_tokens_per_s,
           r->trained_tokens_per_s);
  snprintf(util, sizeof util, "rollout pool %.1f%%, training pool %.1f%%", 100 * r->util_rollout,
           100 * r->util_train);
  snprintf(train, sizeof train, "%.4g s a step, MFU %.1f%%, %.2f GiB per device%s", r->train_step_s,
           100 * r->train_mfu, r->train_memory_bytes / GIB, r->train_oom ? " (OUT OF MEMORY)" : "");
  rpt_html_begin(out, title);
  const char *names[] = {"scenario", "placement", "iteration", "throughput", "utilisation", "training step",
                         "bottleneck"};
  const char *values[] = {job->path, place, iter, tput, util, train, r->bottleneck};
  rpt_html_facts(out, names, values, 7);
  rpt_html_heading(out, "Phases");
  rpt_html_para(out, "Each phase's time on its pool (seconds), in the order they start; the table gives the starts.");
  const char *rows[RL_MAX_PHASES], *series[] = {"all", "rollout", "train"};
  double v[RL_MAX_PHASES * 3] = {0};
  for (int i = 0; i < r->nphases; i++) {
    const struct rl_phase *ph = &r->phase[i];
    rows[i] = ph->name;
    const char *pool = pool_name(job, ph->pool);
    v[i * 3 + (!strcmp(pool, "all") ? 0 : !strcmp(pool, "rollout") ? 1 : 2)] = ph->time_s;
  }
  struct rpt_html_chart ch = {series, 3, rows, r->nphases, v, r->iteration_s, "s", 1, 0, NULL};
  rpt_html_bars(out, &ch);
  static const char *const head[] = {"phase", "pool", "start", "time", "MFU"};
  rpt_html_table_begin(out, head, 5);
  for (int i = 0; i < r->nphases; i++) {
    const struct rl_phase *ph = &r->phase[i];
    char st[32], t[32], mf[32];
    snprintf(st, sizeof st, "%.4g s", ph->start_s);
    snprintf(t, sizeof t, "%.4g s", ph->time_s);
    snprintf(mf, sizeof mf, "%.1f%%", 100 * ph->mfu);
    const char *cells[] = {ph->name, pool_name(job, ph->pool), st, t, mf};
    rpt_html_row(out, cells, 5);
  }
  rpt_html_table_end(out);
  rpt_html_end(out);
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

/* ------------------------------------------------------------------ columns */

#define J(ctx) (((const struct rl_report *)(ctx))->job)
#define R(ctx) (((const struct rl_report *)(ctx))->res)

static const char *c_scenario(const void *x, int i) { (void)i; return J(x)->path; }
static const char *c_model(const void *x, int i) { (void)i; return J(x)->model.name; }
static const char *c_system(const void *x, int i) { (void)i; return J(x)->sys.chip.name; }
static long long c_devices(const void *x, int i) { (void)i; return J(x)->devices; }
static const char *c_algorithm(const void *x, int i) { (void)i; return rl_algo_name(J(x)->spec.algorithm); }
static const char *c_placement(const void *x, int i) { (void)i; return rl_placement_name(J(x)->spec.placement); }
static const char *c_mode(const void *x, int i) { (void)i; return rl_mode_name(J(x)->spec.mode); }
static long long c_rollout_devices(const void *x, int i) { (void)i; return J(x)->rollout_devices; }
static long long c_train_devices(const void *x, int i) { (void)i; return J(x)->train_devices; }
static long long c_rollout_tp(const void *x, int i) { (void)i; return J(x)->spec.rollout.tp; }
static long long c_train_tp(const void *x, int i) { (void)i; return J(x)->plan.tp; }
static long long c_train_pp(const void *x, int i) { (void)i; return J(x)->plan.pp; }
static long long c_sequences(const void *x, int i) { (void)i; return J(x)->sequences; }
static long long c_seed(const void *x, int i) { (void)i; return J(x)->spec.seed; }
static double c_iteration(const void *x, int i) { (void)i; return R(x)->iteration_s; }
static double c_rollout(const void *x, int i) { (void)i; return phase_s(R(x), "rollout"); }
static double c_inference(const void *x, int i)
{
  (void)i;
  const struct rl_result *r = R(x);
  return phase_s(r, "reward") + phase_s(r, "reference") + phase_s(r, "critic_inference") + phase_s(r, "old_logprob");
}
static double c_train(const void *x, int i) { (void)i; return phase_s(R(x), "actor_train") + phase_s(R(x), "critic_train"); }
static double c_sync(const void *x, int i) { (void)i; return phase_s(R(x), "weight_sync"); }
static double c_offload(const void *x, int i) { (void)i; return phase_s(R(x), "reload") + phase_s(R(x), "offload"); }
static double c_idle(const void *x, int i) { (void)i; return R(x)->rollout.idle_s; }
static double c_tail(const void *x, int i) { (void)i; return R(x)->rollout.tail_s; }
static double c_gen_tps(const void *x, int i) { (void)i; return R(x)->generated_tokens_per_s; }
static double c_train_tps(const void *x, int i) { (void)i; return R(x)->trained_tokens_per_s; }
static double c_util_rollout(const void *x, int i) { (void)i; return R(x)->util_rollout; }
static double c_util_train(const void *x, int i) { (void)i; return R(x)->util_train; }
static double c_rollout_mfu(const void *x, int i) { (void)i; return phase_mfu(R(x), "rollout"); }
static double c_train_mfu(const void *x, int i) { (void)i; return R(x)->train_mfu; }
static long long c_train_oom(const void *x, int i) { (void)i; return R(x)->train_oom ? 1 : 0; }
static double c_sync_bytes(const void *x, int i) { (void)i; return R(x)->sync_bytes; }
static const char *c_bottleneck(const void *x, int i) { (void)i; return R(x)->bottleneck; }

/* summary.csv of an RL iteration; the order is the contract (new columns at the end). */
static const struct rpt_column columns[] = {
    {"scenario", RPT_STRING, "text", "the scenario file (or the sweep point's name)", .text = c_scenario},
    {"model", RPT_STRING, "text", "the policy's model name", .text = c_model},
    {"system", RPT_STRING, "text", "the chip's name", .text = c_system},
    {"devices", RPT_INT, "", "devices of the system", .integer = c_devices},
    {"algorithm", RPT_STRING, "text", "grpo or ppo", .text = c_algorithm},
    {"placement", RPT_STRING, "text", "colocated or disaggregated", .text = c_placement},
    {"mode", RPT_STRING, "text", "sync or async (one-step off-policy)", .text = c_mode},
    {"rollout_devices", RPT_INT, "", "devices of the rollout pool", .integer = c_rollout_devices},
    {"train_devices", RPT_INT, "", "devices of the training pool", .integer = c_train_devices},
    {"rollout_tp", RPT_INT, "", "tensor-parallel size of one inference engine", .integer = c_rollout_tp},
    {"train_tp", RPT_INT, "", "tensor-parallel size of the actor's training plan", .integer = c_train_tp},
    {"train_pp", RPT_INT, "", "pipeline stages of the actor's training plan", .integer = c_train_pp},
    {"sequences", RPT_INT, "", "responses per iteration (prompts x group size)", .integer = c_sequences},
    {"seed", RPT_INT, "", "seed of the response lengths", .integer = c_seed},
    {"iteration_time_s", RPT_REAL, "s", "time of one iteration (steady state when async)", .real = c_iteration},
    {"rollout_s", RPT_REAL, "s", "rollout generation phase", .real = c_rollout},
    {"inference_s", RPT_REAL, "s", "reward, reference, critic and old-log-prob inference phases", .real = c_inference},
    {"train_s", RPT_REAL, "s", "actor and critic training phases", .real = c_train},
    {"weight_sync_s", RPT_REAL, "s", "weight synchronisation from the training to the rollout layout",
     .real = c_sync},
    {"offload_s", RPT_REAL, "s", "colocated: offload and reload through the host link", .real = c_offload},
    {"straggler_idle_s", RPT_REAL, "s", "mean over engines of the time idle waiting for the slowest", .real = c_idle},
    {"rollout_tail_s", RPT_REAL, "s", "the slowest engine's drain after its last admission", .real = c_tail},
    {"generated_tokens_per_s", RPT_REAL, "tokens/s", "response tokens generated per second of iteration",
     .real = c_gen_tps},
    {"trained_tokens_per_s", RPT_REAL, "tokens/s", "tokens trained per second of iteration", .real = c_train_tps},
    {"util_rollout", RPT_REAL, "fraction", "busy share of the iteration of the rollout pool", .real = c_util_rollout},
    {"util_train", RPT_REAL, "fraction", "busy share of the iteration of the training pool", .real = c_util_train},
    {"rollout_mfu", RPT_REAL, "fraction", "MFU of the rollout phase", .real = c_rollout_mfu},
    {"train_mfu", RPT_REAL, "fraction", "MFU of one actor training step", .real = c_train_mfu},
    {"train_oom", RPT_INT, "0/1", "1 when the actor's training step does not fit in HBM", .integer = c_train_oom},
    {"weight_sync_bytes", RPT_REAL, "bytes", "bytes moved by the weight sync, all devices", .real = c_sync_bytes},
    {"bottleneck", RPT_STRING, "text", "what bounds the iteration, in words", .text = c_bottleneck},
    {NULL},
};

#undef J
#undef R

const struct rpt_column *rl_summary_columns(void)
{
  return columns;
}

void rl_summary_csv_header(struct npu_buf *out)
{
  rpt_columns_csv_header(columns, out);
}

void rl_summary_csv_row(const struct rl_job *job, const struct rl_result *r, struct npu_buf *out)
{
  struct rl_report x = {job, r};
  rpt_columns_csv_row(columns, &x, out);
}
