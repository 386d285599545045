/*
 * engine.h - an LLM inference engine's scheduler, request by request: the shared engine model
 * of serving (serve/) and of the RL rollout (rl/).
 *
 * As vLLM and its Ascend port schedule (v1's scheduler; v0's prefill-first as an option): every
 * step the running sequences decode one token each, then prefill chunks of waiting or partly
 * prefilled prompts fill the token budget (chunked prefill); without chunking a step is either
 * whole prompts or decodes, prompts first. The KV cache is paged (blocks of block_tokens): a
 * sequence takes blocks as its context grows, and when none is free the most recently admitted
 * running sequence is preempted (its blocks freed, it is queued again at the front and its
 * prompt and generated tokens are recomputed: vLLM's recompute preemption); or admission
 * reserves blocks for the whole sequence (reserve_full: no preemption, the RL rollout's
 * vLLM setting). With prefix caching, a request whose shared prefix an engine has computed
 * skips those tokens' prefill. Step times come from a callback (serve/infer.h's sv_step_s), so
 * the scheduler knows nothing of kernels.
 *
 * Replicas run side by side in one event loop: a request arriving at t goes to a replica chosen
 * by the router (round-robin, least outstanding requests, or the replica holding its prefix),
 * or to the replica the caller fixed; a step that began before t does not see it.
 */
#ifndef NPUSIM_SERVE_ENGINE_H
#define NPUSIM_SERVE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "serve/infer.h"

struct sv_request {
  double arrival_s;
  int prompt, output;      /* tokens; output >= 1 (the prefill samples the first) */
  int prefix;              /* shared-prefix group, -1 none */
  int prefix_tokens;       /* of the prompt, the group's shared prefix */
  int replica;             /* the router's choice (SV_ROUTE_FIXED: the caller's) */
  bool kv_ready;           /* its prompt's KV cache arrives with it (a decode engine of a disaggregated
                              deployment): admitted decoding; a preemption recomputes it as usual */
};

enum sv_route { SV_ROUTE_ROUND_ROBIN, SV_ROUTE_LEAST_LOADED, SV_ROUTE_PREFIX, SV_ROUTE_FIXED };

struct sv_engine_cfg {
  int max_seqs;            /* running sequences (vLLM max_num_seqs) */
  int token_budget;        /* tokens per step (max_num_batched_tokens) */
  long kv_blocks;          /* KV cache per replica */
  int block_tokens;
  bool chunked;            /* chunked prefill (v1); else prefill-first steps of whole prompts (v0) */
  bool reserve_full;       /* admission reserves prompt + output: no preemption */
  bool prefix_caching;
  const int *graph_sizes;  /* decode-only steps padded up to the next of these token counts; NULL none */
  int ngraph;
  int replicas;
  int route;               /* enum sv_route */
  int spec_tokens;         /* speculative decoding: draft tokens a decoding sequence proposes per step; 0 none */
  double spec_acceptance;  /* the chance each draft token is accepted, given the ones before it were */
  unsigned long spec_seed; /* of the acceptance draws (one stream per request: the order of steps does not matter) */
  int window;              /* sliding-window layers' window (model.window): their share of the step's
                              attention reads at most this many tokens per query; 0 none */
};

/* vLLM's default graph capture sizes (1, 2, 4, then 8 to 256 by 8, then to 512 by 16), not
 * beyond max_seqs (a decode step has at most that many tokens): their count, out[SV_GRAPH_MAX]. */
#define SV_GRAPH_MAX 80
int sv_graph_sizes(int max_seqs, int *out);

/* The step time of s on one replica (sv_step_s with its cost model); parts as there. */
typedef double (*sv_step_fn)(const void *ctx, const struct sv_step *s, double parts[SV_PART_COUNT]);

/* Per request. */
struct sv_req_out {
  double first_s;          /* its first token */
  double finish_s;         /* its last token */
  double max_gap_s;        /* longest wait between two of its tokens */
  int preemptions;
  int cached_tokens;       /* prompt tokens served from the prefix cache */
};

/* Inter-token gaps as a histogram: logarithmic bins from 1 us to 1000 s, 1000 per decade. */
#define SV_GAP_BINS 9000
struct sv_gaps {
  double count[SV_GAP_BINS];
  double n, sum;
};
void sv_gaps_add(struct sv_gaps *g, double v);
/* The q-quantile (0..1) of the gaps, interpolated inside its bin; 0 when there are none. */
double sv_gaps_quantile(const struct sv_gaps *g, double q);

/* A replica's step, kept for the trace and the timeline when wanted. */
struct sv_step_rec {
  double start_s, time_s;
  int replica, decode, prefill_tokens, running, waiting;
  long kv_used;            /* blocks in use after the step */
};

/* Kinds of step: whole or chunked prompts only, decodes only, both. */
enum sv_step_kind { SV_STEP_PREFILL, SV_STEP_DECODE, SV_STEP_MIXED, SV_STEP_KINDS };

/*
 * The run over time in SV_TL_BINS bins of width_s, starting at 0: each step is counted in the
 * bin of its start. The width starts at 1 ms and doubles (pairs of bins merge) whenever a step
 * starts beyond the last bin, so a run of any length ends in at most SV_TL_BINS bins.
 */
#define SV_TL_BINS 64
struct sv_tl {
  double width_s;
  int n;                          /* bins in use */
  double busy_s[SV_TL_BINS];      /* replica time stepping */
  double running_s[SV_TL_BINS];   /* running sequences x step time */
  double waiting_s[SV_TL_BINS];   /* queued requests x step time */
  double kv_s[SV_TL_BINS];        /* share of the KV cache in use x step time */
  double preemptions[SV_TL_BINS];
  double tokens[SV_TL_BINS];      /* output tokens */
  double arrivals[SV_TL_BINS];
};

struct sv_engine_stats {
  long steps, preemptions;
  double busy_s;                  /* summed over replicas */
  double parts_s[SV_PART_COUNT];  /* how busy_s splits */
  double prefill_s, decode_s, mixed_s; /* busy_s by kind of step */
  double kind_parts_s[SV_STEP_KINDS][SV_PART_COUNT]; /* how each kind's time splits */
  struct sv_tl tl;
  double prefill_tokens, decode_tokens, recomputed_tokens, cached_tokens;
  double draft_tokens, accepted_tokens; /* speculative decoding: proposed and accepted drafts */
  double verify_steps;            /* sequence-steps that verified drafts */
  double batch_steps;             /* sum over steps of the scheduled sequences */
  double kv_block_s;              /* sum over steps of blocks in use x step time */
  long kv_peak;                   /* most blocks in use on one replica */
  int running_peak;
  double end_s;                   /* last step's end */
  struct sv_gaps *gaps;           /* inter-token gaps of every request (allocated) */
  struct sv_step_rec *rec;        /* every step, when recording (allocated) */
  size_t nrec, caprec;
};

/*
 * Run requests req[0..n) (arrivals non-decreasing) through cfg->replicas replicas; out[i] for
 * req[i] (req[i].replica is set to where it ran). step(ctx, ...) gives step times. record: keep
 * every step in st->rec. Every request must fit one replica's KV cache alone and the token
 * budget must hold at least one token per running sequence (the caller checks): the run
 * cannot stall.
 */
void sv_engine_run(const struct sv_engine_cfg *cfg, sv_step_fn step, const void *ctx, struct sv_request *req, int n,
                   struct sv_req_out *out, bool record, struct sv_engine_stats *st);
/* Add b's counts, times, histogram and timeline to a's (two pools of a deployment): the
 * timeline at the coarser of the two widths; step records are not merged. */
void sv_engine_stats_add(struct sv_engine_stats *a, const struct sv_engine_stats *b);
void sv_engine_stats_release(struct sv_engine_stats *st);

#endif
