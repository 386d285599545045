/*
 * serve.h - LLM inference serving on a simulated cluster: the `serve` section of a scenario,
 * the job it describes (a model, a system, a deployment and a workload), one run's
 * request-level results and its reports.
 *
 * A deployment is `replicas` engines of TP size `tp` (MoE experts TP-sharded or spread whole
 * over an engine's ranks), ranks r*tp .. r*tp+tp-1 for replica r, behind a router. Requests
 * arrive as a gamma process (Poisson at burstiness 1, as vLLM's benchmark_serving draws them)
 * or from a trace file; lengths are seeded draws. Each engine is serve/engine.h's scheduler
 * over serve/infer.h's step costs (every kernel through the chip model, TP collectives timed on
 * the engine's links). Design and shortcuts: docs/SERVING.md.
 */
#ifndef NPUSIM_SERVE_SERVE_H
#define NPUSIM_SERVE_SERVE_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "common/diag.h"
#include "common/strutil.h"
#include "common/trace.h"
#include "serve/engine.h"
#include "serve/workload.h"
#include "workloads/job.h"
#include "workloads/model.h"

enum sv_preemption { SV_PREEMPT_RECOMPUTE, SV_PREEMPT_RESERVE };
enum sv_speculative { SV_SPEC_NONE, SV_SPEC_NGRAM, SV_SPEC_MTP };

/* The `serve` section (every key in serve/spec.c's table and docs/SCENARIOS.md). */
struct sv_spec {
  int requests;                /* requests drawn (no trace) */
  double rate;                 /* requests/s; 0: every request at t = 0 (offline batch) */
  double burstiness;           /* shape of the gamma inter-arrival times: 1 Poisson, < 1 burstier */
  char trace[512];             /* a request trace file (CSV); "" none */
  char trace_path[1024];       /* resolved by the loader */
  struct sv_dist prompt;       /* prompt tokens after the shared prefix */
  struct sv_dist output;       /* generated tokens */
  int prefix_groups;           /* requests share one of this many prefixes; 0 none */
  int prefix_tokens;           /* tokens of a shared prefix */
  int seed;                    /* arrivals, lengths, prefix groups (reported) */
  int tp;                      /* tensor-parallel size of one engine */
  bool expert_parallel;        /* MoE: whole experts spread over an engine's ranks */
  int replicas;                /* engines (decode engines when disaggregated); 0: as many as the devices hold */
  int prefill_replicas;        /* disaggregated: prefill-only engines, ranks first; 0: colocated */
  int prefill_tp;              /* of a prefill engine; 0: tp */
  int router;                  /* enum sv_route (not FIXED) */
  int max_num_seqs;            /* running sequences per engine */
  int max_batched_tokens;      /* token budget per step */
  int block_size;              /* KV cache block, tokens */
  bool chunked_prefill;
  bool prefix_caching;
  int preemption;              /* enum sv_preemption */
  double memory_utilization;   /* share of HBM the engine may use */
  bool graph;                  /* decode-only steps padded to graph capture sizes */
  bool custom_allreduce;       /* TP all-reduces as vLLM's custom all-reduce where it applies (serve/probe.c) */
  struct sv_engine_time engine; /* engine time per step beyond the kernels */
  int speculative;             /* enum sv_speculative */
  int spec_tokens;             /* draft tokens per step and sequence */
  double spec_acceptance;      /* per draft token, given the ones before it were accepted */
  double slo_ttft_s;           /* goodput SLOs; 0 none */
  double slo_tpot_s;
  double slo_e2e_s;
};

/* The serve section's table (target: struct sv_spec) and its registration (zeroes s first). */
const struct npu_table *sv_spec_table(void);
void sv_spec_register(struct npu_cfg *cfg, struct sv_spec *s);
const char *sv_router_name(int r);
const char *sv_preemption_name(int p);
const char *sv_speculative_name(int m);

/* A serving scenario, loaded and checked; its requests built (arrivals, lengths, prefixes). */
struct sv_job {
  char path[512];                 /* scenario file as given (or the display name) */
  struct npu_cfg *cfg;
  struct arch_system sys;
  struct wl_model model;
  struct wl_run run;
  struct sv_spec spec;
  int devices;                    /* of the system */
  int replicas;                   /* engines (decode engines when disaggregated) */
  int prefill_replicas;           /* disaggregated: prefill engines (ranks 0 .. prefill_replicas x prefill_tp - 1) */
  int prefill_tp;
  long prefill_kv_blocks;         /* per prefill engine */
  struct sv_request *req;         /* the workload, arrivals non-decreasing */
  int nreq;
  long kv_blocks;                 /* per replica */
  double weight_bytes;            /* per device */
  double activation_bytes;        /* per device, one step of max_batched_tokens */
  double kv_token_bytes;          /* per device and context token */
  int longest;                    /* prompt + output of the longest request, tokens */
  int graph_sizes[SV_GRAPH_MAX];
  int ngraph;
};

/*
 * Load and check a serving scenario: path, then overrides "KEY=VALUE". Errors name file:line
 * and the key (NPU_ECONFIG; NPU_EIO for an unreadable trace). A file without a serve section is
 * refused.
 */
int sv_job_load(struct sv_job *job, const char *path, const char *const *sets, int nsets, struct npu_diag *diag);
void sv_job_release(struct sv_job *job);

/* ------------------------------------------------------------------ results */

/* mean and percentiles of one latency over the requests it applies to */
struct sv_latency {
  double mean, p50, p90, p99, max;
  int n;
};

/* Over time: the run cut into bins of width_s (whole-run averages over replicas). */
struct sv_timeline_bin {
  double running;        /* mean running sequences per replica */
  double waiting;        /* mean queued requests per replica */
  double kv_used;        /* mean share of the KV cache in use */
  double busy;           /* share of replica time stepping */
  double preemptions;
  double tokens;         /* output tokens */
  double arrivals;
};

struct sv_result {
  struct sv_latency ttft, tpot, itl, e2e;
  double duration_s;              /* first arrival to last token */
  double request_rate;            /* completed / duration */
  double input_tokens_per_s, output_tokens_per_s;
  double output_tokens_per_s_per_device;
  double goodput;                 /* requests/s meeting every SLO */
  double slo_attainment;          /* share of requests meeting every SLO */
  double slo_met[3];              /* share meeting each SLO given: TTFT, TPOT, E2E (1 when not given) */
  double input_tokens, output_tokens;
  double kv_mean, kv_peak;        /* shares of the KV cache (mean over replicas and time; one replica's peak) */
  double mean_batch;              /* scheduled sequences per step */
  int running_peak;
  long steps, preemptions;
  double recomputed_tokens, cached_tokens;
  double busy;                    /* share of replica time stepping (every engine) */
  double prefill_busy, decode_busy; /* disaggregated: each pool's share of its engines' time stepping */
  double kv_transfer_mean_s;      /* disaggregated: prefill engine to decode engine, per request */
  double spec_accepted_per_step;  /* speculative decoding: accepted drafts per verifying sequence-step */
  double spec_draft_tokens, spec_accepted_tokens;
  double kv_transfer_bytes;       /* disaggregated: every request's KV cache, all ranks */
  double kv_link_latency_s, kv_link_bytes_per_s; /* the transfer's fit on the platform, per rank pair */
  double parts_s[SV_PART_COUNT];  /* how stepping time splits, all replicas */
  double kind_s[3];               /* stepping time of prefill-only, decode-only, mixed steps */
  double kind_parts_s[3][SV_PART_COUNT];
  double flops;                   /* model FLOPs of every request (prefill and decode, no recomputation) */
  double mfu;                     /* flops over (duration x devices of the replicas x bf16 peak) */
  double peak_flops_per_s;        /* of one device, bf16 */
  char bottleneck[256];
  double timeline_width_s;
  int timeline_n;
  struct sv_timeline_bin timeline[SV_TL_BINS];
};

/*
 * Simulate the job: cost the engine's kernels (op cache), time its TP collectives in a child
 * process (the parent never starts SimGrid), run every request through the replicas. trace
 * (may be NULL) gets requests as slices, engine steps and counters per replica. 0 or an error.
 */
int sv_run(struct sv_job *job, struct npu_trace *trace, struct sv_result *res, struct npu_diag *diag);

/* What a serving run's columns read: the job and its result (both borrowed). */
struct sv_report {
  const struct sv_job *job;
  const struct sv_result *res;
};
struct rpt_column;
/* The columns of summary.csv (report/columns.h), read from a struct sv_report; static. */
const struct rpt_column *sv_summary_columns(void);
/* Reports (serve/summary.c): what `npusim run` prints, and summary.json. */
void sv_summary_text(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out);
void sv_summary_json(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out);
/* One self-contained HTML page (report/html.h): key figures, latencies, engine time by step kind. */
void sv_summary_html(const struct sv_job *job, const struct sv_result *r, struct npu_buf *out);

#endif
