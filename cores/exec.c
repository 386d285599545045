/*
 * exec.c - the pipe executor shared by both fidelities.
 *
 * Each pipe runs its queue in order; an instruction starts when its pipe is free, the scalar
 * unit has issued it, and its flags are set. Instructions that touch only the core (MTE1,
 * cube, vector, scalar, local copies, flags) are resolved as soon as their start time is
 * known, in dataflow order, without waiting for simulated time to reach them: their durations
 * do not depend on anything shared. Copies to or from GM depend on L2/HBM bandwidth shared with
 * every other core, so they go to a GM backend: the event backend starts a SimGrid flow when
 * simulated time reaches their start and resolves them when it completes; the analytic
 * backend resolves them at once with a static share of bandwidth. Causality is kept by the
 * program's flags, so functional effects applied in resolution order are those of hardware.
 *
 * DMA engines pipeline their memory latency: a GM copy frees its pipe when its bytes have
 * moved, and its data lands one L2 (hit) or HBM (miss) latency later; set_flag and
 * pipe_barrier on that pipe wait for the data.
 */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "memory/dma.h"
#include "memory/gm.h"
#include "memory/platform.h"

#define PIPES_AIC ((1u << CORE_PIPE_S) | (1u << CORE_PIPE_MTE2) | (1u << CORE_PIPE_MTE1) | \
                   (1u << CORE_PIPE_M) | (1u << CORE_PIPE_FIX))
#define PIPES_AIV ((1u << CORE_PIPE_S) | (1u << CORE_PIPE_MTE2) | (1u << CORE_PIPE_V) | \
                   (1u << CORE_PIPE_MTE3))

/* ------------------------------------------------------------------ GM copies waiting for their start */

static bool heap_less(const struct core__heap_item *a, const struct core__heap_item *b)
{
  if (a->t != b->t) return a->t < b->t;
  if (a->core != b->core) return a->core < b->core;
  return a->pipe < b->pipe;
}

void core__heap_push(struct core__run *r, double t, int core, int pipe)
{
  if (r->nheap == r->heap_cap) {
    r->heap_cap = r->heap_cap ? 2 * r->heap_cap : 64;
    r->heap = npu_xrealloc(r->heap, (size_t)r->heap_cap * sizeof *r->heap);
  }
  int i = r->nheap++;
  r->heap[i] = (struct core__heap_item){t, core, pipe};
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!heap_less(&r->heap[i], &r->heap[parent])) break;
    struct core__heap_item tmp = r->heap[i];
    r->heap[i] = r->heap[parent];
    r->heap[parent] = tmp;
    i = parent;
  }
}

struct core__heap_item core__heap_pop(struct core__run *r)
{
  struct core__heap_item top = r->heap[0];
  r->heap[0] = r->heap[--r->nheap];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, s = i;
    if (l < r->nheap && heap_less(&r->heap[l], &r->heap[s])) s = l;
    if (l + 1 < r->nheap && heap_less(&r->heap[l + 1], &r->heap[s])) s = l + 1;
    if (s == i) break;
    struct core__heap_item tmp = r->heap[i];
    r->heap[i] = r->heap[s];
    r->heap[s] = tmp;
    i = s;
  }
  return top;
}

/* ------------------------------------------------------------------ time queues */

static void tq_push(struct core__tq *q, double t, uint64_t flow)
{
  if (q->n == q->cap) {
    uint32_t cap = q->cap ? 2 * q->cap : 4;
    double *x = npu_xmalloc(cap * sizeof *x);
    uint64_t *f = npu_xmalloc(cap * sizeof *f);
    for (uint32_t i = 0; i < q->n; i++) {
      x[i] = q->t[(q->head + i) % q->cap];
      f[i] = q->flow[(q->head + i) % q->cap];
    }
    free(q->t);
    free(q->flow);
    q->t = x;
    q->flow = f;
    q->head = 0;
    q->cap = cap;
  }
  q->t[(q->head + q->n) % q->cap] = t;
  q->flow[(q->head + q->n) % q->cap] = flow;
  q->n++;
}

static double tq_pop(struct core__tq *q, uint64_t *flow)
{
  double t = q->t[q->head];
  *flow = q->flow[q->head];
  q->head = (q->head + 1) % q->cap;
  q->n--;
  return t;
}

/* ------------------------------------------------------------------ instruction rings */

/* Rings kept between runs, at most RING_KEEP, the largest. One pool for the process: npusim
 * costs one kernel at a time (SimGrid runs its actors one at a time, on whatever thread), and a
 * pool per thread would be lost, and leaked, with an actor's thread. */
#define RING_KEEP 64
static struct ring {
  struct core_instr *q;
  uint32_t cap;
} ring_pool[RING_KEEP];
static int ring_n;

struct core_instr *core__ring_take(uint32_t min_cap, uint32_t *cap)
{
  int best = -1;
  for (int i = 0; i < ring_n; i++)
    if (ring_pool[i].cap >= min_cap && (best < 0 || ring_pool[i].cap > ring_pool[best].cap)) best = i;
  if (best < 0) {
    *cap = min_cap;
    return npu_xmalloc(min_cap * sizeof(struct core_instr));
  }
  struct ring r = ring_pool[best];
  ring_pool[best] = ring_pool[--ring_n];
  *cap = r.cap;
  return r.q;
}

void core__ring_give(struct core_instr *q, uint32_t cap)
{
  if (!q) return;
  if (ring_n < RING_KEEP) {
    ring_pool[ring_n++] = (struct ring){q, cap};
    return;
  }
  int small = 0; /* full: keep the larger of this one and the smallest kept */
  for (int i = 1; i < ring_n; i++)
    if (ring_pool[i].cap < ring_pool[small].cap) small = i;
  if (ring_pool[small].cap >= cap) {
    free(q);
    return;
  }
  free(ring_pool[small].q);
  ring_pool[small] = (struct ring){q, cap};
}

/* ------------------------------------------------------------------ setup */

static void init_core(struct core__run *r, struct core__core *c, int id, uint8_t kind)
{
  c->id = id;
  c->kind = kind;
  c->pipes = kind == CORE_KIND_AIC ? PIPES_AIC : kind == CORE_KIND_AIV ? PIPES_AIV : (PIPES_AIC | PIPES_AIV);
  c->unit = -1;
  for (int p = 0; p < CORE_PIPE_COUNT; p++) c->pipe[p].st = P_EMPTY;
  if (r->opts.functional) {
    for (int s = MEM_L1; s < MEM_SPACE_COUNT; s++) {
      bool cube_buf = s != MEM_UB;
      if ((cube_buf && !(c->pipes & (1u << CORE_PIPE_M))) || (!cube_buf && !(c->pipes & (1u << CORE_PIPE_V))))
        continue;
      c->buf[s] = npu_xcalloc(1, r->chip->buf[mem_space_buf((enum mem_space)s)].size_bytes);
    }
  }
}

void core__run_init(struct core__run *r, const struct arch_chip *chip, struct mem_gm *gm,
                    const struct core_kernel *k, const struct core_launch_opts *opts)
{
  memset(r, 0, sizeof *r);
  r->chip = chip;
  r->gm = gm;
  r->k = k;
  r->opts = *opts;
  r->trace = opts->trace;
  r->observe = opts->fidelity == CORE_FIDELITY_EVENT && opts->observe && opts->observe->instr ? opts->observe : NULL;
  r->host_prefix = opts->host_prefix ? opts->host_prefix : "";
  r->pending_limit = 4096;
  bool split = chip->org == ARCH_ORG_SPLIT;
  r->ranks = opts->ranks > 1 ? opts->ranks : 1;
  r->per_rank = mem_platform_cores(chip);
  r->ncores = r->ranks * r->per_rank;
  r->cores = npu_xcalloc((size_t)r->ncores, sizeof *r->cores);
  r->nunits = r->ranks * k->block_dim;
  r->units = npu_xcalloc((size_t)r->nunits, sizeof *r->units);
  r->tps = npu_xcalloc((size_t)r->nunits, sizeof *r->tps);
  size_t stride = (k->unit_ctx_bytes + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * _Alignof(max_align_t);
  r->unit_ctx = stride ? npu_xcalloc((size_t)r->nunits, stride) : NULL;
  int ratio = split ? chip->aiv_count / chip->aic_count : 1;
  for (int u = 0; u < r->nunits; u++) {
    struct core__unit *x = &r->units[u];
    x->index = u;
    x->rank = u / k->block_dim;
    x->local = u % k->block_dim;
    x->phys[0] = x->phys[1] = x->phys[2] = -1;
    int l = x->local;
    switch (k->mode) {
    case CORE_MODE_CUBE: x->phys[CORE_SUB_AIC] = l; break;
    case CORE_MODE_VECTOR: x->phys[CORE_SUB_AIV0] = split ? chip->aic_count + l : l; break;
    case CORE_MODE_MIX:
      x->phys[CORE_SUB_AIC] = l;
      if (split) {
        x->phys[CORE_SUB_AIV0] = chip->aic_count + ratio * l;
        if (ratio > 1) x->phys[CORE_SUB_AIV1] = chip->aic_count + ratio * l + 1;
      } else {
        x->phys[CORE_SUB_AIV0] = x->phys[CORE_SUB_AIV1] = l;
      }
      break;
    }
    for (int s = 0; s < 3; s++)
      if (x->phys[s] >= 0) x->phys[s] += x->rank * r->per_rank;
    r->tps[u] = (struct core_tp){r, x, 0, stride ? r->unit_ctx + (size_t)u * stride : NULL};
  }
  for (int i = 0; i < r->ncores; i++) {
    int li = i % r->per_rank;
    uint8_t kind = !split ? CORE_KIND_COUPLED : li < chip->aic_count ? CORE_KIND_AIC : CORE_KIND_AIV;
    r->cores[i].id = i;
    r->cores[i].kind = kind;
    r->cores[i].unit = -1;
  }
  /* Only cores of the launch get pipes and buffers. */
  for (int u = 0; u < r->nunits; u++) {
    for (int s = 0; s < 3; s++) {
      int p = r->units[u].phys[s];
      if (p < 0 || r->cores[p].unit >= 0) continue;
      init_core(r, &r->cores[p], p, r->cores[p].kind);
      r->cores[p].unit = u;
      r->cores[p].sub = s;
      for (int q = 0; q < CORE_PIPE_COUNT; q++)
        if (r->cores[p].pipes & (1u << q)) r->sync_members++;
    }
  }
}

void core__run_release(struct core__run *r)
{
  for (int i = 0; i < r->ncores; i++) {
    struct core__core *c = &r->cores[i];
    for (int p = 0; p < CORE_PIPE_COUNT; p++) core__ring_give(c->pipe[p].q, c->pipe[p].cap);
    if (c->flags)
      for (size_t f = 0; f < CORE_PIPE_COUNT * CORE_PIPE_COUNT * CORE_FLAG_IDS; f++) {
        free(c->flags[f].t);
        free(c->flags[f].flow);
      }
    free(c->flags);
    for (int s = 0; s < MEM_SPACE_COUNT; s++) free(c->buf[s]);
    free(c->scalar_t);
  }
  for (int u = 0; u < r->nunits; u++)
    for (size_t f = 0; f < sizeof r->units[u].xflags / sizeof r->units[u].xflags[0]; f++) {
      free(r->units[u].xflags[f].t);
      free(r->units[u].xflags[f].flow);
    }
  for (int d = 0; d < r->ranks; d++) {
    if (r->signals[d])
      for (int i = 0; i < CORE_SIGNAL_IDS; i++) free(r->signals[d][i].t);
    free(r->signals[d]);
    if (d > 0) mem_l2_destroy(r->l2_of[d]);
  }
  free(r->cores);
  free(r->units);
  free(r->tps);
  free(r->unit_ctx);
  free(r->ready);
  free(r->heap);
  mem_l2_destroy(r->l2);
}

/* ------------------------------------------------------------------ scheduling */

/*
 * Whether a pipe is parked on an action its head instruction has already taken: its arrival at a
 * fence or all-core barrier was counted (P_FENCE, until release_fence / release_sync), or its GM
 * copy was handed to the backend (P_ISSUE / P_INFLIGHT, until core__gm_finish). Resolving the head
 * again would take the action twice: count the arrival twice (a barrier released before every
 * pipe arrived, or one that never releases: a false deadlock) or start the copy twice (its bytes
 * and flows doubled). Stale entries on the ready list are normal -- a GM copy that the analytic
 * backend resolves at once wakes its own pipe, which then runs on to the marker behind it; a pipe
 * that empties and makes its unit emit the next block wakes itself and runs on into that block --
 * so resolve_pipe ignores such a pipe. The other waits (flags, scalar) re-check their condition
 * and are safe to retry.
 */
static bool parked_on_own_action(const struct core__pipe *p)
{
  return p->st == P_FENCE || p->st == P_ISSUE || p->st == P_INFLIGHT;
}

/* Queue a pipe for resolve_pipe. Pipes parked on something they already did (see
 * parked_on_own_action) stay off the list: what they wait for wakes them. */
void core__wake(struct core__run *r, struct core__core *c, int pipe)
{
  struct core__pipe *p = &c->pipe[pipe];
  if (!(c->pipes & (1u << pipe)) || p->in_ready || parked_on_own_action(p)) return;
  if (r->nready == r->ready_cap) {
    r->ready_cap = r->ready_cap ? 2 * r->ready_cap : 256;
    r->ready = npu_xrealloc(r->ready, (size_t)r->ready_cap * sizeof *r->ready);
  }
  p->in_ready = true;
  r->ready[r->nready++] = c->id * CORE_PIPE_COUNT + pipe;
}

static struct core__tq *flag_q(struct core__core *c, const struct core_instr *in)
{
  /* allocated at a core's first flag: a trace or a sample touches few of a chip's cores */
  if (!c->flags) c->flags = npu_xcalloc(CORE_PIPE_COUNT * CORE_PIPE_COUNT * CORE_FLAG_IDS, sizeof *c->flags);
  return &c->flags[(in->src_pipe * CORE_PIPE_COUNT + in->dst_pipe) * CORE_FLAG_IDS + in->id];
}

static struct core__tq *xflag_q(struct core__run *r, struct core__core *c, int from, int to, int id)
{
  return &r->units[c->unit].xflags[(from * 3 + to) * CORE_XFLAG_IDS + id];
}

static struct core__signal *signal_of(struct core__run *r, int rank, int id)
{
  if (!r->signals[rank]) r->signals[rank] = npu_xcalloc(CORE_SIGNAL_IDS, sizeof *r->signals[rank]);
  return &r->signals[rank][id];
}

/* A notify arrives at t: kept in time order, so a wait's count-th notify is t[count - 1]. */
static void signal_add(struct core__signal *s, double t)
{
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 8;
    s->t = npu_xrealloc(s->t, s->cap * sizeof *s->t);
  }
  uint32_t i = s->n++;
  for (; i > 0 && s->t[i - 1] > t; i--) s->t[i] = s->t[i - 1];
  s->t[i] = t;
}

/* A signal that received more notifies than a wait on it asked for: that wait may have resolved
 * before an earlier notify (see core_notify_wait). */
static void signal_overrun(struct core__run *r, int rank, int id, const struct core__signal *s)
{
  core__fail(r, NPU_EINVAL,
             "signal %d of device %d received %u notifies, but a wait asked for %u: a signal is one event, "
             "every wait on it asks for all its notifies",
             id, rank, s->n, s->asked);
}

static void pop(struct core__pipe *p)
{
  p->head = (p->head + 1) & (p->cap - 1);
  p->count--;
}

static void record(struct core__run *r, struct core__core *c, int pipe, const struct core_instr *in,
                   double start, double end)
{
  struct core__pipe *p = &c->pipe[pipe];
  p->busy_s += end - start;
  p->n++;
  if (end > r->end) r->end = end;
  core__account(r, c, pipe, in, start, end);
}

void core__gm_finish(struct core__run *r, struct core__core *c, int pipe, double end, double miss)
{
  struct core__pipe *p = &c->pipe[pipe];
  const struct core_instr *in = &p->q[p->head];
  if (r->opts.functional) core__func(r, c, in);
  record(r, c, pipe, in, p->start, end);
  /* Read data lands one memory latency after its bytes have moved (HBM's for the share of
   * copies that miss, L2's for the others); a write frees its source buffer as soon as its
   * bytes have left it. */
  bool read = in->u.copy.src.space == MEM_GM;
  double lat = !read ? 0 : r->chip->l2.latency_s + miss * (r->chip->hbm.latency_s - r->chip->l2.latency_s);
  if (p->remote) { /* across the link: its latency too, for a write as for a read */
    lat += r->opts.link_latency_s;
    p->remote = false;
  }
  p->free_at = end;
  if (end + lat > p->data_ready) p->data_ready = end + lat;
  if (p->data_ready > r->end) r->end = p->data_ready;
  pop(p);
  p->st = P_RUN;
  core__wake(r, c, pipe);
}

bool core__gm_tile(const struct core__run *r, const struct core__core *c, const struct core_copy *cp,
                   struct core_tile *g)
{
  *g = cp->src.space == MEM_GM ? cp->src : cp->dst;
  if (!cp->indexed) return true;
  if (!r->opts.functional || !c->buf[MEM_UB]) return false; /* no data: the index is unknown */
  uint32_t index;
  memcpy(&index, c->buf[MEM_UB] + cp->index_ub, sizeof index);
  struct core_tile x = *g;
  x.addr += (uint64_t)index * cp->index_stride;
  if (!mem_gm_resolve(r->gm, x.addr, core_tile_bytes(&x), NULL)) return false;
  *g = x;
  return true;
}

/* Release every pipe waiting at the all-core barrier. The release is part of the kernel even when
 * nothing follows it (a trailing barrier: every core waits for it before the kernel ends). */
static void release_sync(struct core__run *r)
{
  double t = r->sync_t + r->chip->sync.all_core_s;
  if (t > r->end) r->end = t;
  for (int i = 0; i < r->ncores; i++) {
    struct core__core *c = &r->cores[i];
    for (int p = 0; p < CORE_PIPE_COUNT; p++) {
      struct core__pipe *q = &c->pipe[p];
      if (q->st != P_FENCE || !q->count || q->q[q->head].op != CORE_OP_SYNC_ALL) continue;
      q->free_at = t;
      pop(q);
      q->st = P_RUN;
      core__wake(r, c, p);
    }
  }
  r->sync_arrived = 0;
  r->sync_t = 0;
}

static void release_fence(struct core__run *r, struct core__core *c)
{
  for (int p = 0; p < CORE_PIPE_COUNT; p++) {
    struct core__pipe *q = &c->pipe[p];
    if (q->st != P_FENCE || !q->count || q->q[q->head].op != CORE_OP_FENCE) continue;
    q->free_at = c->fence_t;
    pop(q);
    q->st = P_RUN;
    core__wake(r, c, p);
  }
  c->fence_arrived = 0;
  c->fence_t = 0;
}

static int core_pipe_count(const struct core__core *c)
{
  int n = 0;
  for (int p = 0; p < CORE_PIPE_COUNT; p++) n += (c->pipes >> p) & 1;
  return n;
}

/* Try the head instructions of one pipe until it blocks or empties. */
static void resolve_pipe(struct core__run *r, struct core__core *c, int pipe)
{
  struct core__pipe *p = &c->pipe[pipe];
  const struct arch_chip *chip = r->chip;
  if (parked_on_own_action(p)) return;
  while (!r->err) {
    if (p->count == 0) {
      p->st = P_EMPTY;
      struct core__unit *u = &r->units[c->unit];
      if (!u->finished && core__unit_pending(r, u) < r->pending_limit) {
        core__generate(r, u);
        if (p->count) continue;
      }
      return;
    }
    struct core_instr *in = &p->q[p->head];
    double t = p->free_at;
    if (in->op != CORE_OP_SCALAR && in->scalar_seq > 0) {
      if (c->scalar_done < in->scalar_seq) {
        p->st = P_SCALAR;
        return;
      }
      if (c->scalar_t[in->scalar_seq - 1] > t) t = c->scalar_t[in->scalar_seq - 1];
    }
    switch (in->op) {
    case CORE_OP_SCALAR: {
      double end = t + core__local_time(chip, in, NULL);
      if (c->scalar_done == c->scalar_cap) {
        c->scalar_cap = c->scalar_cap ? 2 * c->scalar_cap : 64;
        c->scalar_t = npu_xrealloc(c->scalar_t, c->scalar_cap * sizeof *c->scalar_t);
      }
      c->scalar_t[c->scalar_done++] = end;
      record(r, c, pipe, in, t, end);
      p->free_at = end;
      for (int q = 0; q < CORE_PIPE_COUNT; q++)
        if (c->pipe[q].st == P_SCALAR) core__wake(r, c, q);
      break;
    }
    case CORE_OP_SET_FLAG: {
      double ts = (t > p->data_ready ? t : p->data_ready) + chip->sync.flag_cycles / chip->clock_hz;
      uint64_t flow = r->observe ? ++r->flows : 0;
      tq_push(flag_q(c, in), ts, flow);
      if (r->observe) core__observe(r, c, pipe, in, ts, ts, flow);
      p->free_at = t;
      if (c->pipe[in->dst_pipe].st == P_FLAG) core__wake(r, c, in->dst_pipe);
      break;
    }
    case CORE_OP_WAIT_FLAG: {
      struct core__tq *q = flag_q(c, in);
      if (!q->n) {
        p->st = P_FLAG;
        return;
      }
      uint64_t flow;
      double ts = tq_pop(q, &flow);
      p->free_at = ts > t ? ts : t;
      if (r->observe) core__observe(r, c, pipe, in, t, p->free_at, flow);
      break;
    }
    case CORE_OP_XSET: {
      double ts = (t > p->data_ready ? t : p->data_ready) + chip->sync.cross_core_s;
      uint64_t flow = r->observe ? ++r->flows : 0;
      tq_push(xflag_q(r, c, in->src_pipe, in->dst_pipe, in->id), ts, flow);
      if (r->observe) core__observe(r, c, pipe, in, ts, ts, flow);
      p->free_at = t;
      struct core__unit *u = &r->units[c->unit];
      struct core__core *peer = &r->cores[u->phys[in->dst_pipe]];
      for (int q = 0; q < CORE_PIPE_COUNT; q++)
        if (peer->pipe[q].st == P_XFLAG) core__wake(r, peer, q);
      break;
    }
    case CORE_OP_XWAIT: {
      /* in->dst_pipe holds the peer (the setter), in->src_pipe ourselves */
      struct core__tq *q = xflag_q(r, c, in->dst_pipe, in->src_pipe, in->id);
      if (!q->n) {
        p->st = P_XFLAG;
        return;
      }
      uint64_t flow;
      double ts = tq_pop(q, &flow);
      p->free_at = ts > t ? ts : t;
      if (r->observe) core__observe(r, c, pipe, in, t, p->free_at, flow);
      break;
    }
    case CORE_OP_NOTIFY: {
      const struct core_sig *sg = &in->u.sig;
      int from = c->id / r->per_rank;
      double ts = (t > p->data_ready ? t : p->data_ready) +
                  (sg->rank == from ? chip->sync.cross_core_s : r->opts.link_latency_s);
      struct core__signal *s = signal_of(r, sg->rank, sg->id);
      signal_add(s, ts);
      if (s->asked && s->n > s->asked) {
        signal_overrun(r, sg->rank, sg->id, s);
        return;
      }
      if (r->observe) core__observe(r, c, pipe, in, ts, ts, 0);
      p->free_at = t;
      for (int i = sg->rank * r->per_rank; i < (sg->rank + 1) * r->per_rank; i++)
        for (int q = 0; q < CORE_PIPE_COUNT; q++)
          if (r->cores[i].pipe[q].st == P_SIGNAL) core__wake(r, &r->cores[i], q);
      break;
    }
    case CORE_OP_NOTIFY_WAIT: {
      const struct core_sig *sg = &in->u.sig;
      int rank = c->id / r->per_rank;
      struct core__signal *s = signal_of(r, rank, sg->id);
      if (sg->count > s->asked) s->asked = sg->count;
      if (s->n > s->asked) {
        signal_overrun(r, rank, sg->id, s);
        return;
      }
      if (s->n < sg->count) {
        p->st = P_SIGNAL;
        return;
      }
      double ts = s->t[sg->count - 1];
      p->free_at = ts > t ? ts : t;
      if (r->observe) core__observe(r, c, pipe, in, t, p->free_at, 0);
      break;
    }
    case CORE_OP_BARRIER:
      p->free_at = t > p->data_ready ? t : p->data_ready;
      if (r->observe) core__observe(r, c, pipe, in, t, p->free_at, 0);
      break;
    case CORE_OP_FENCE: {
      double ta = t > p->data_ready ? t : p->data_ready;
      if (ta > c->fence_t) c->fence_t = ta;
      p->st = P_FENCE;
      if (++c->fence_arrived == core_pipe_count(c)) release_fence(r, c);
      return;
    }
    case CORE_OP_SYNC_ALL: {
      double ta = t > p->data_ready ? t : p->data_ready;
      if (ta > r->sync_t) r->sync_t = ta;
      p->st = P_FENCE;
      if (++r->sync_arrived == r->sync_members) release_sync(r);
      return;
    }
    case CORE_OP_COPY:
      if (in->u.copy.src.space == MEM_GM || in->u.copy.dst.space == MEM_GM) {
        p->start = t;
        if (!r->be->start(r, c, pipe, t + chip->dma.setup_cycles / chip->clock_hz)) return;
        continue; /* resolved at once: gm_finish popped it */
      }
      /* a local copy */
      __attribute__((fallthrough));
    case CORE_OP_MMAD:
    case CORE_OP_VEC: {
      if (in->op == CORE_OP_VEC && in->u.vec.scalar_from_ub) {
        /* the scalar operand comes from UB: a V -> S sync after the vector work before it has
         * landed (a flag, flag_cycles), then GetValue on the scalar unit (scalar_cycles), then
         * the instruction issues (Ascend C: SetFlag/WaitFlag<V_S>, GetValue, Muls/Adds/...) */
        if (p->data_ready > t) t = p->data_ready;
        t += (chip->sync.flag_cycles + chip->sync.scalar_cycles) / chip->clock_hz;
      }
      uint64_t conflict = 0;
      double end = t + core__local_time(chip, in, &conflict);
      r->res.bank_conflict_cycles += conflict;
      if (r->opts.functional) core__func(r, c, in);
      record(r, c, pipe, in, t, end);
      p->free_at = end;
      if (end > p->data_ready) p->data_ready = end;
      break;
    }
    default:
      NPU_PANIC("bad opcode %d", in->op);
    }
    pop(p);
    p->st = P_RUN;
  }
}

void core__drain(struct core__run *r)
{
  while (r->nready && !r->err) {
    int x = r->ready[--r->nready];
    struct core__core *c = &r->cores[x / CORE_PIPE_COUNT];
    int pipe = x % CORE_PIPE_COUNT;
    c->pipe[pipe].in_ready = false;
    resolve_pipe(r, c, pipe);
  }
}

bool core__all_done(const struct core__run *r)
{
  for (int u = 0; u < r->nunits; u++)
    if (!r->units[u].finished) return false;
  for (int i = 0; i < r->ncores; i++)
    for (int p = 0; p < CORE_PIPE_COUNT; p++)
      if (r->cores[i].pipe[p].count) return false;
  return true;
}

/* Nothing can move: either a unit is held back by the pending limit, or the program deadlocks. */
int core__deadlock(struct core__run *r)
{
  for (int u = 0; u < r->nunits; u++) {
    if (r->units[u].finished) continue;
    core__generate(r, &r->units[u]);
    return 0; /* progress: more work was emitted */
  }
  struct npu_buf b = {0};
  int shown = 0;
  for (int i = 0; i < r->ncores && shown < 8; i++) {
    struct core__core *c = &r->cores[i];
    for (int p = 0; p < CORE_PIPE_COUNT && shown < 8; p++) {
      struct core__pipe *q = &c->pipe[p];
      if (!q->count) continue;
      const struct core_instr *in = &q->q[q->head];
      const char *kind = c->kind == CORE_KIND_AIC ? "aic" : c->kind == CORE_KIND_AIV ? "aiv" : "core";
      int li = c->id % r->per_rank, idx = c->kind == CORE_KIND_AIV ? li - r->chip->aic_count : li;
      char dev[24] = "";
      if (r->ranks > 1) snprintf(dev, sizeof dev, "device %d ", c->id / r->per_rank);
      npu_buf_printf(&b, "%s%s%s%d pipe %s waits ", shown ? "; " : "", dev, kind, idx, core_pipe_name(p));
      if (in->op == CORE_OP_NOTIFY_WAIT)
        npu_buf_printf(&b, "for %u notifies of signal %u (%u arrived)", in->u.sig.count, in->u.sig.id,
                       r->signals[c->id / r->per_rank] ? r->signals[c->id / r->per_rank][in->u.sig.id].n : 0);
      else if (in->op == CORE_OP_WAIT_FLAG)
        npu_buf_printf(&b, "for flag %s->%s id %d", core_pipe_name(in->src_pipe), core_pipe_name(in->dst_pipe), in->id);
      else if (in->op == CORE_OP_XWAIT)
        npu_buf_printf(&b, "for cross-core flag id %d from sub-core %d", in->id, in->dst_pipe);
      else if (in->op == CORE_OP_FENCE || in->op == CORE_OP_SYNC_ALL)
        npu_buf_printf(&b, "at a %s", in->op == CORE_OP_FENCE ? "pipe barrier (all pipes)" : "all-core barrier");
      else
        npu_buf_printf(&b, "behind blocked work");
      shown++;
    }
  }
  core__fail(r, NPU_EINVAL, "deadlock: %s that is never satisfied", shown ? npu_buf_str(&b) : "no pipe can progress");
  npu_buf_release(&b);
  return NPU_EINVAL;
}

/* ------------------------------------------------------------------ launch */

int core_launch(const struct arch_chip *chip, struct mem_gm *gm, const struct core_kernel *k,
                const struct core_launch_opts *opts, struct core_result *out,
                struct npu_diag *diag)
{
  int units_max = k->mode == CORE_MODE_VECTOR
                      ? (chip->org == ARCH_ORG_SPLIT ? chip->aiv_count : chip->aic_count)
                      : chip->aic_count;
  if (k->max_units > 0 && units_max > k->max_units)
    return npu_diag_set(diag, NULL, 0, k->name, "the chip has %d %s cores; this kernel supports at most %d",
                        units_max, k->mode == CORE_MODE_VECTOR ? "vector" : "cube", k->max_units),
           NPU_EUNSUPPORTED;
  if (k->block_dim < 1 || k->block_dim > units_max)
    return npu_diag_set(diag, NULL, 0, k->name, "block_dim %d outside 1..%d (%s cores of %s)",
                        k->block_dim, units_max, k->mode == CORE_MODE_VECTOR ? "vector" : "cube",
                        chip->name), NPU_EINVAL;
  if (k->mode == CORE_MODE_MIX && chip->org == ARCH_ORG_SPLIT && chip->aiv_count / chip->aic_count > 2)
    return npu_diag_set(diag, NULL, 0, k->name, "MIX launches support up to 2 vector cores per cube core"), NPU_EINVAL;
  if (opts->ranks > CORE_MAX_RANKS)
    return npu_diag_set(diag, NULL, 0, k->name, "%d devices in one launch; at most %d", opts->ranks, CORE_MAX_RANKS),
           NPU_EINVAL;
  if (opts->ranks > 1 && opts->fidelity == CORE_FIDELITY_ANALYTIC)
    return npu_diag_set(diag, NULL, 0, k->name, "a launch over %d devices runs at event fidelity only", opts->ranks),
           NPU_EUNSUPPORTED;
  if (opts->fidelity == CORE_FIDELITY_ANALYTIC)
    return core__run_analytic(chip, gm, k, opts, out, diag);
  struct core__run r;
  core__run_init(&r, chip, gm, k, opts);
  r.be = &core__event_backend;
  int rc = core__run_event(&r);
  if (rc == 0 && r.err) rc = r.err;
  if (rc) {
    *diag = r.diag;
  } else {
    core__finish_result(&r);
    *out = r.res;
  }
  core__run_release(&r);
  return rc;
}
