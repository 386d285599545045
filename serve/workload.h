/*
 * workload.h - the requests of a serving run (or an RL rollout): length distributions,
 * arrivals, shared prefixes, or a trace file of measured requests. Seeded (gsl mt19937).
 */
#ifndef NPUSIM_SERVE_WORKLOAD_H
#define NPUSIM_SERVE_WORKLOAD_H

#include <gsl/gsl_rng.h>

#include "common/cfg.h"
#include "common/diag.h"
#include "serve/engine.h"

enum sv_dist_kind { SV_DIST_FIXED, SV_DIST_UNIFORM, SV_DIST_LOGNORMAL, SV_DIST_HISTOGRAM };

#define SV_HIST_MAX 64

/* A token-length distribution as a scenario writes it (rl.response.*, serve.prompt.*, ...). */
struct sv_dist {
  int distribution;          /* enum sv_dist_kind */
  int mean;                  /* tokens; the length itself for "fixed"; the median for "lognormal" */
  int min, max;              /* tokens: uniform's lower end; every draw is clipped to [min, max] */
  double sigma;              /* lognormal: sigma of ln(length) */
  char histogram[1024];      /* histogram: "LEN:WEIGHT, ..." as written */
  int hist_n;                /* parsed (sv_dist_finish): bins */
  int hist_len[SV_HIST_MAX]; /* tokens of each bin */
  double hist_w[SV_HIST_MAX];/* relative frequency of each bin */
};

/* The distribution names, NULL-terminated (for the key tables). */
extern const char *const sv_dist_names[];

/*
 * Check d as loaded from keys prefix.* ("rl.response"): parse the histogram, refuse a mean
 * outside [min, max] and a histogram without the distribution. 0 or NPU_ECONFIG with the key.
 */
int sv_dist_finish(const struct npu_cfg *cfg, const char *prefix, struct sv_dist *d, struct npu_diag *diag);
/* n draws from d with r (clipped to [min, max]). */
void sv_dist_draw(const struct sv_dist *d, gsl_rng *r, int n, int *out);
/* "lognormal median 512" and the like. */
void sv_dist_describe(const struct sv_dist *d, char *buf, size_t n);

/*
 * A trace file of requests: CSV with the header "arrival_s,prompt_tokens,output_tokens" (an
 * optional fourth column prefix_group, -1 none), arrivals non-decreasing. *out (allocated) and
 * *n; errors name file:line (NPU_ECONFIG; NPU_EIO when it cannot be read).
 */
int sv_trace_load(const char *path, struct sv_request **out, int *n, struct npu_diag *diag);

#endif
