/*
 * expand.h - a training step's work per rank: the kernels and tensor-parallel collectives of
 * each segment (a layer's forward, its backward, embedding, head and loss, optimizer), with
 * real shapes from the model and the plan, written into a step program (program.h). Their
 * costs: cost.c (workloads_int.h).
 */
#ifndef NPUSIM_WORKLOADS_EXPAND_H
#define NPUSIM_WORKLOADS_EXPAND_H

#include <stddef.h>

#include "workloads/program.h"

/* Build p's items, kernels, collectives, segments and per-stage optimizer segments and
 * parameter counts (no costs yet) from p->model and p->plan. */
void wl_expand(struct wl_program *p);

/* One rank's parameters of layer l: the non-expert part (TP-sharded) in *dense, the routed
 * experts (experts / ep of them, whole) in *expert (0 for a dense layer, and with ep 1, where the
 * experts are TP-split and replicated over dp x cp like the rest). */
void wl_layer_rank_params(const struct wl_program *p, int l, double *dense, double *expert);

/* One rank's parameters of the embedding piece (the table, TP-sharded, and learned positions)
 * and of the head piece (the output projection, TP-sharded, a copy of the table when tied, and
 * the final norm): what ZeRO-3 gathers and reduces for them, and FSDP2 copies. */
double wl_embed_rank_params(const struct wl_program *p);
double wl_head_rank_params(const struct wl_program *p);

/* Text of a kernel for reports: "gemm m=... n=...". */
void wl_kernel_label(const struct wl_kernel *k, char *buf, size_t n);

#endif
