/*
 * routing.h - MoE token routing for the training replay: how many token copies each expert of
 * an MoE layer receives in one micro-batch, and how many each EP rank sends to each other one
 * (the AllToAllV of the dispatch; the combine sends the same amounts back).
 *
 * The optional "routing" section of a scenario says where tokens go (docs/ROUTING.md):
 *   routing.distribution = "uniform" | "zipf" | "profile"   the experts' shares of the load
 *   routing.skew         Zipf exponent (zipf)
 *   routing.profile      file of relative expert loads (profile), relative to the file setting it
 *   routing.per_layer    a new draw per layer (else every layer routes alike)
 *   routing.hot_shift    zipf: the hot experts change from layer to layer (else fixed)
 * The draw is a sampling model, not a gate; docs/ROUTING.md says what it keeps and what it gives
 * up. Every draw is a pure function of (section, model, ep, tokens, seed, layer, micro-batch):
 * GSL's MT19937 is seeded from the seed mixed with the layer and micro-batch indices, so results
 * do not depend on the order in which draws are made.
 */
#ifndef NPUSIM_WORKLOADS_ROUTING_H
#define NPUSIM_WORKLOADS_ROUTING_H

#include <stdbool.h>

#include "common/cfg.h"
#include "common/diag.h"
#include "workloads/model.h"

enum wl_route_dist { WL_ROUTE_UNIFORM, WL_ROUTE_ZIPF, WL_ROUTE_PROFILE, WL_ROUTE_DIST_COUNT };

/* Exact group-limited routing enumerates sets of groups: at most this many groups. */
#define WL_ROUTE_MAX_GROUPS 16

/* The "routing" section (filled by the loader), and the profile once wl_routing_finish read it. */
struct wl_routing_cfg {
  int distribution;        /* enum wl_route_dist */
  double skew;             /* Zipf exponent s: the r-th hottest expert's share ~ 1 / r^s */
  char profile[512];       /* profile file as written ("": none) */
  bool per_layer;          /* draw a new routing per layer */
  bool hot_shift;          /* zipf: a new hot-expert permutation per layer */
  /* set by wl_routing_finish (distribution "profile" only); freed by wl_routing_release */
  char profile_path[1024]; /* the file read, as messages show it */
  double *profile_load;    /* [profile_n] relative loads as read (not normalised) */
  int profile_n;
};

/* The "routing" section's table (target: struct wl_routing_cfg). */
const struct npu_table *wl_routing_table(void);
/* Register the table with a loader; zeroes c first. */
void wl_routing_register(struct npu_cfg *cfg, struct wl_routing_cfg *c);
/*
 * Checks after loading (after wl_model_finish): a routing section needs an MoE model;
 * group-limited routing has at most WL_ROUTE_MAX_GROUPS groups and top_k <= the experts of
 * top_groups groups; with distribution "profile", reads routing.profile (resolved against the
 * directory of the file that set it; from the command line, against the working directory) and
 * checks it: it opens, has exactly model.moe.experts non-negative loads, at least top_k of them
 * positive. Errors name file:line (of the scenario, or of the profile) and the key. Returns 0 or
 * NPU_ECONFIG. May be called again (it frees what an earlier call read).
 */
int wl_routing_finish(struct npu_cfg *cfg, struct wl_routing_cfg *c, const struct wl_model *m,
                      struct npu_diag *diag);
/* Free what wl_routing_finish read (c stays usable for uniform and Zipf draws). */
void wl_routing_release(struct wl_routing_cfg *c);

/* One MoE layer's routing in one micro-batch, over the ep ranks of an EP group. */
struct wl_route {
  int ep, experts, per_rank;   /* per_rank = experts / ep, held contiguously by each EP rank */
  int top_k;
  double tokens_per_rank;
  double capacity;             /* copies one expert keeps (capacity factor); 0: dropless */
  double *load;                /* [experts] token copies routed to each expert (before capacity) */
  double *kept;                /* [experts] after the capacity factor (dropless: = load) */
  double *matrix;              /* [ep*ep] copies sent from EP rank i to EP rank j at [i*ep+j] (after
                                  dropping): the AllToAllV of the dispatch; the diagonal stays local */
  double dropped;              /* copies dropped */
  double max_mean_expert;      /* max / mean of kept over experts (1: balanced, or nothing routed) */
  double max_mean_rank;        /* max / mean over EP ranks of the kept copies each receives */
  int groups;                  /* model.moe.groups (1 without group-limited routing) */
  double *group_tokens;        /* [ep*groups] tokens of rank i with a copy in group g: of the tokens
                                  whose groups include g, those whose k experts do not all fall
                                  outside it (the chance taken with uniform shares within the
                                  groups); what node-limited dispatch sends across once per token */
};

/*
 * Draw the routing of model layer `layer` in micro-batch `microbatch`: each of the ep ranks holds
 * tokens_per_rank tokens (a non-negative integer); each token goes to top_k distinct experts; EP
 * rank j holds experts [j E/ep, (j+1) E/ep). c may be NULL (uniform, per layer). Counts are
 * integers held in doubles; the sum of matrix is exactly ep x tokens_per_rank x top_k - dropped.
 * out is overwritten (release what it held first); free it with wl_route_release. Returns 0, or
 * NPU_EINVAL with diag filled (not an MoE model, ep not dividing the experts, bad token count,
 * groups the model checks do not refuse but routing cannot take).
 */
int wl_route_draw(const struct wl_routing_cfg *c, const struct wl_model *m, int ep,
                  double tokens_per_rank, int seed, int layer, int microbatch, struct wl_route *out,
                  struct npu_diag *diag);
void wl_route_release(struct wl_route *r);

/* Name of a distribution: "uniform", "zipf", "profile". */
const char *wl_route_dist_name(enum wl_route_dist d);

#endif
