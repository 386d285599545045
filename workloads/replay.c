/*
 * replay.c - a training step on the cluster: one SimGrid actor drives every replay rank of a
 * step program (program.h) as a state machine over simulated time. The program arrives built
 * and costed; the replay probes the memoised collectives, then only simulates: it never costs a
 * kernel (event-fidelity costing forks, which a started engine must not see).
 *
 * Replay ranks. Ranks that do the same work at the same time are replayed once: one replay rank
 * per pipeline stage in a dense model (it stands for the stage's tp x cp x dp ranks); in an MoE
 * model one per (stage, EP index), since the experts a rank holds receive different numbers of
 * tokens (it stands for the tp x edp ranks of that EP index).
 *
 * Slots and steps. A replay rank runs the slots of its schedule in order (a micro-batch's
 * forward, backward, input-gradient or weight-gradient pass through one model chunk). A slot
 * first waits for its input from the neighbouring stage, then runs its steps (struct wl_step):
 * compute (a costed segment, or the rank's experts for its routed tokens), collectives it joins
 * and waits for (the EP all-to-alls, which every replay rank of the EP group joins), collectives
 * it only posts
 * (gradient buckets, ZeRO-3 parameter gathers one piece ahead) and waits for posted ones; then
 * it posts its output. Collectives are instances of the interconnect executor
 * (interconnect/exec.h) over every physical group they stand for: their flows share links.
 * At the end a rank waits for its gradient reductions, runs the optimizer and (ZeRO 1-2)
 * gathers its parameters.
 *
 * Where time goes: compute categories and TP/CP from the segments; waiting for an input splits
 * into bubble (the sender had not finished) and pp_comm (the transfer); waiting in an EP
 * all-to-all is ep_comm; waiting for gradients, gathers and parameter gathers is dp_comm; the
 * rest up to the slowest rank's end is idle.
 *
 * This file's one job is the state machine and its driver: when a rank posts, joins and waits,
 * and where waiting counts. Putting the communications on the network is replay_p2p.c's
 * (pipeline transfers) and replay_coll.c's (buckets, gathers, EP all-to-alls); the state they
 * share is in workloads_int.h.
 */
#include "workloads/replay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "common/json.h"
#include "engine/engine.h"
#include "interconnect/comm.h"
#include "interconnect/exec.h"
#include "interconnect/platform.h"
#include "interconnect/topo.h"
#include "workloads/memory.h"
#include "workloads/program.h"
#include "workloads/workloads_int.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

#define EPS 1e-12

/* The micro-batch of step s of rank rk's current slot (or its pair's second slot). */
static int step_mb(const struct wl__rank *rk, const struct wl_step *s)
{
  return (int)rk->ps->slots[rk->pc + s->half].slot.mb;
}

/* ------------------------------------------------------------------ wake-ups */

void wl__wake_at(struct wl__replay *r, int idx, double t)
{
  if (r->nheap == r->capheap) {
    r->capheap = r->capheap ? 2 * r->capheap : 1024;
    r->heap = npu_xrealloc(r->heap, r->capheap * sizeof *r->heap);
  }
  size_t i = r->nheap++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    if (r->heap[up].t <= t) break;
    r->heap[i] = r->heap[up];
    i = up;
  }
  r->heap[i] = (struct wl__wake){t, idx};
}

static struct wl__wake wake_pop(struct wl__replay *r)
{
  struct wl__wake top = r->heap[0], last = r->heap[--r->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= r->nheap) break;
    if (c + 1 < r->nheap && r->heap[c + 1].t < r->heap[c].t) c++;
    if (r->heap[c].t >= last.t) break;
    r->heap[i] = r->heap[c];
    i = c;
  }
  if (r->nheap) r->heap[i] = last;
  return top;
}

/* ------------------------------------------------------------------ shared collectives */

static bool sh_done(struct wl__replay *r, int h)
{
  return wl__shared_done(&r->sh, h, r->x);
}

static void sh_drop(struct wl__replay *r, int h)
{
  wl__shared_drop(&r->sh, h, r->x);
}

/* ------------------------------------------------------------------ steps */

/* n calls the host dispatches beside the compute stream's segments (communication, sends). */
static void host_dispatch(const struct wl__replay *r, struct wl__rank *rk, int n)
{
  rk->host += n * r->host_d;
  rk->res->launches += n;
}

/* When work of dev seconds on the stream, free at now, ends: launched as `launches` dispatches
 * whose lead over the host's clock is `lead` (struct wl_seg), it waits for the host when the
 * host is behind (max(now + dev, host + lead)); the wait is counted as host time. */
static double stream_end(const struct wl__replay *r, struct wl__rank *rk, double now, double dev, double lead,
                         int launches, double loss)
{
  /* compute lost to data-parallel collectives found done since the last work runs first */
  double debt = rk->debt;
  rk->res->cat_s[WL_CAT_INTERFERE] += debt;
  rk->debt = 0;
  double end = now + debt + dev, h = rk->host + lead;
  host_dispatch(r, rk, launches);
  if (r->host_d > 0 && h > end) { /* host-bound; with the host left out exactly the stream's time */
    rk->res->cat_s[WL_CAT_HOST] += h - end;
    end = h;
  }
  if (r->prog->dp_sys && dev > 0) {
    if (rk->nbusy == rk->capbusy) {
      rk->capbusy = rk->capbusy ? 2 * rk->capbusy : 256;
      rk->busy = npu_xrealloc(rk->busy, (size_t)rk->capbusy * sizeof *rk->busy);
    }
    rk->busy[rk->nbusy++] = (struct wl__busy){end - dev, end, loss};
  }
  return end;
}

/*
 * Data-parallel collective h, posted by rk at t0, is done: the compute it slowed. While it ran
 * (t0 to its end) it held node.ccl's cores and part of HBM, so the stream's work in that window
 * progressed at (1 - loss) of its rate: loss x the busy time was not done and runs later, less
 * what the window's idle time (the stream waiting, for this collective or anything else) would
 * have absorbed. A fully hidden collective costs loss x its duration; one longer than the
 * compute beside it, only its exposed part (docs/TRAINING.md, "Interference").
 */
double wl__dp_lost(const struct wl__busy *b, int n, double t0, double t1)
{
  if (!(t1 > t0)) return 0;
  double w = 0, busy = 0;
  for (int i = n - 1; i >= 0; i--) {
    if (b[i].t1 <= t0) break; /* in time order: every earlier one ended before the window */
    double o = fmin(b[i].t1, t1) - fmax(b[i].t0, t0);
    if (o > 0) {
      w += b[i].loss * o;
      busy += o;
    }
  }
  return fmax(0, w - ((t1 - t0) - busy));
}

static void charge_dp(struct wl__replay *r, struct wl__rank *rk, int h, double t0)
{
  if (r->prog->dp_sys) rk->debt += wl__dp_lost(rk->busy, rk->nbusy, t0, wl__shared_end_s(&r->sh, h, r->x));
}

/* Data-parallel collective h, posted at t0, is done: its interference, and its span for what
 * of the data-parallel communication the step hid (dp_hidden). */
static void dp_done(struct wl__replay *r, struct wl__rank *rk, int h, double t0)
{
  if (rk->ndp == rk->capdp) {
    rk->capdp = rk->capdp ? 2 * rk->capdp : 64;
    rk->dpspan = npu_xrealloc(rk->dpspan, (size_t)rk->capdp * sizeof *rk->dpspan);
  }
  rk->dpspan[rk->ndp++] = (struct wl__busy){t0, wl__shared_end_s(&r->sh, h, r->x), 0};
  charge_dp(r, rk, h, t0);
}

static int by_start(const void *a, const void *b)
{
  double x = ((const struct wl__busy *)a)->t0, y = ((const struct wl__busy *)b)->t0;
  return (x > y) - (x < y);
}

/* The data-parallel communication hidden: the length of the union of the collectives' spans
 * less the time the rank waited for them. */
static void dp_hidden(struct wl__rank *rk)
{
  if (rk->ndp > 1) qsort(rk->dpspan, (size_t)rk->ndp, sizeof *rk->dpspan, by_start);
  double len = 0, a = 0, b = -1;
  for (int i = 0; i < rk->ndp; i++) {
    const struct wl__busy *s = &rk->dpspan[i];
    if (s->t0 > b) {
      len += b > a ? b - a : 0;
      a = s->t0, b = s->t1;
    } else if (s->t1 > b) {
      b = s->t1;
    }
  }
  len += b > a ? b - a : 0;
  rk->res->hidden_s[WL_CAT_DP] = fmax(0, len - rk->res->cat_s[WL_CAT_DP]);
}

/* The step ends at t: what interference is still owed runs first. */
static double pay_debt(struct wl__rank *rk, double t)
{
  rk->res->cat_s[WL_CAT_INTERFERE] += rk->debt;
  t += rk->debt;
  rk->debt = 0;
  return t;
}

static void add_seg(struct wl__rank *rk, const struct wl_seg *sg)
{
  for (int c = 0; c < WL_CAT_COUNT; c++) {
    rk->res->cat_s[c] += sg->cat_s[c];
    rk->res->hidden_s[c] += sg->hidden_s[c];
  }
  rk->res->flops += sg->flops;
  rk->res->model_flops += sg->model_flops;
}

static void wait_on(struct wl__rank *rk, int h, enum wl_cat cat, double now)
{
  rk->waitsh = h;
  rk->waitcat = cat;
  rk->since = now;
  rk->st = WL__ST_WAITC;
}

/* Start the slot at pc (and its F&B partner): its steps from the program. */
static void start_slot(struct wl__rank *rk, double now)
{
  const struct wl_prog_slot *ps = &rk->ps->slots[rk->pc];
  const struct wl_step_list *l = &rk->ps->lists[ps->list];
  rk->steps = &rk->ps->steps[l->first];
  rk->nsteps = l->n;
  rk->sk = 0;
  rk->slot_t0 = now;
  rk->st = WL__ST_STEP;
}

/* The slot (and its DualPipe partner) as one slice on the micro-batch track: "F mb 3". */
static void trace_slot(struct wl__replay *r, struct wl__rank *rk, bool pair, double now)
{
  static const char *const phase[] = {"F", "B", "Bi", "W"};
  const struct wl_slot *a = &rk->ps->slots[rk->pc].slot;
  char name[64];
  int n = snprintf(name, sizeof name, "%s mb %d", phase[a->phase], (int)a->mb);
  if (pair) {
    const struct wl_slot *b = &rk->ps->slots[rk->pc + 1].slot;
    snprintf(name + n, sizeof name - (size_t)n, " + %s mb %d", phase[b->phase], (int)b->mb);
  }
  npu_trace_add(r->trace, rk->idx, 3, npu_trace_intern(r->trace, name), rk->slot_t0, now - rk->slot_t0);
  /* the memory counter: a forward stores its (micro-batch, chunk)'s activations until its
   * backward (or the input part of a split backward) frees them */
  if (rk->pc == 0) npu_trace_counter(r->trace, rk->idx, "memory GiB", rk->slot_t0, rk->mem_static_bytes / GIB);
  for (int q = 0; q <= (pair ? 1 : 0); q++) {
    int ph = rk->ps->slots[rk->pc + (size_t)q].slot.phase;
    rk->live += ph == 0 ? 1 : ph == 3 ? 0 : -1;
  }
  if (rk->live < 0) rk->live = 0;
  npu_trace_counter(r->trace, rk->idx, "memory GiB", now,
                    (rk->mem_static_bytes + rk->live * rk->mem_unit_bytes) / GIB);
}

static const char *const comm_dims[] = {"TP", "CP", "EP", "DP", "PP", "ETP"}; /* enum wl_dim, WL_GROUP_ETP */

/* The first of n lanes free at t0 (ends[]: when each lane's last slice ends) for a slice t0 to
 * end, its end moved; lane 0 when none is (more at once than lanes: it nests on the first).
 * Slices on one thread must nest, so what overlaps goes side by side. */
static int take_lane(double *ends, int n, double t0, double end)
{
  int lane = 0;
  while (lane < n && ends[lane] > t0 + EPS) lane++;
  if (lane == n) lane = 0;
  if (end > ends[lane]) ends[lane] = end;
  return lane;
}

/* A collective's or a transfer's whole span, t0 to end, on its dimension's communication track
 * (tid 32 + 2 dim + lane, "TP communication"; data parallelism has its own, trace_dp): two lanes
 * per dimension (take_lane). */
static void trace_comm(struct wl__replay *r, struct wl__rank *rk, int dim, const char *name, double t0, double end)
{
  if (!(end > t0)) return;
  int lane = take_lane(rk->comm_lane_end[dim], 2, t0, end);
  int tid = 32 + 2 * dim + lane;
  unsigned bit = 1u << (2 * dim + lane);
  if (!(rk->comm_named & bit)) {
    char track[40];
    snprintf(track, sizeof track, "%s communication%s", comm_dims[dim], lane ? " 2" : "");
    npu_trace_name(r->trace, rk->idx, tid, track);
    rk->comm_named |= bit;
  }
  npu_trace_add(r->trace, rk->idx, tid, name, t0, end - t0);
}

/* A segment's kernels and collectives, in order, on the compute track, ending when the stream
 * does (a host-bound segment leaves the stream idle before them); an overlapped collective
 * shows the time it adds (interference and exposed part) there, and its whole time on its
 * dimension's communication track, beside the kernel it overlaps (a reduce-scatter of chunks
 * from the end of the GEMM's first chunk). */
static void trace_seg(struct wl__replay *r, struct wl__rank *rk, const struct wl_seg *sg, double end)
{
  const struct wl_program *j = r->prog;
  double t = end - sg->time_s;
  if (sg->nitems > r->item_cap) {
    r->item_cap = sg->nitems;
    r->item_t0 = npu_xrealloc(r->item_t0, 2 * (size_t)r->item_cap * sizeof *r->item_t0);
  }
  double *dur = r->item_t0 + sg->nitems; /* each item's time on the stream, after the starts */
  for (int i = 0; i < sg->nitems; i++) { /* where each item starts on the compute track */
    dur[i] = wl__item_time(j, sg->first_item + i);
    r->item_t0[i] = t;
    t += fmax(0, dur[i]);
  }
  for (int i = sg->first_item; i < sg->first_item + sg->nitems; i++) {
    const struct wl_item *it = &j->items[i];
    double d = dur[i - sg->first_item];
    t = r->item_t0[i - sg->first_item];
    if (it->coll) {
      const struct wl_coll *c = &j->colls[it->index];
      bool beside = it->ovl != WL_OVL_NONE || it->hide >= 0;
      char buf[64];
      snprintf(buf, sizeof buf, "%s %s", comm_dims[c->dim], ic_op_name(c->op));
      const char *whole = npu_trace_intern(r->trace, buf);
      double t0 = t, span = c->time_s;
      if (beside && it->hide >= sg->first_item && it->hide < sg->first_item + sg->nitems) {
        t0 = r->item_t0[it->hide - sg->first_item];
        if (it->ovl == WL_OVL_PIPE) {
          t0 += j->kernels[j->items[it->hide].index].time_s / it->nchunks;
          span = it->nchunks * j->colls[it->chunk].time_s;
        }
      }
      trace_comm(r, rk, c->dim, whole, t0, t0 + span);
      if (d <= 0) continue;
      if (beside) {
        snprintf(buf, sizeof buf, "%s %s (exposed)", comm_dims[c->dim], ic_op_name(c->op));
        npu_trace_add(r->trace, rk->idx, 0, npu_trace_intern(r->trace, buf), t, d);
      } else {
        npu_trace_add(r->trace, rk->idx, 0, whole, t, d);
      }
    } else {
      if (d <= 0) continue; /* the kernel's arguments, FLOPs and bound as the slice's arguments */
      const struct wl_kernel *k = &j->kernels[it->index];
      if (!r->kargs) r->kargs = npu_xcalloc((size_t)j->nkernels + 1, sizeof *r->kargs);
      if (!r->kargs[it->index]) {
        struct npu_buf a = {0};
        npu_buf_puts(&a, "{\"args\":");
        npu_json_quote(&a, k->args);
        npu_buf_printf(&a, ",\"flops\":%.6g,\"bound\":", k->flops);
        npu_json_quote(&a, k->bottleneck);
        npu_buf_puts(&a, "}");
        r->kargs[it->index] = npu_trace_intern(r->trace, npu_buf_str(&a));
        npu_buf_release(&a);
      }
      npu_trace_add_args(r->trace, rk->idx, 0, k->op, t, d, r->kargs[it->index]);
    }
  }
}

/* The end of the current slot (and its partner): post the outputs, go to the next slot. */
static void end_slot(struct wl__replay *r, struct wl__rank *rk, double now)
{
  bool pair = rk->ps->slots[rk->pc].slot.overlap && rk->pc + 1 < rk->ps->nslots;
  NPU_ASSERT(rk->ndq == 0); /* every deferred all-to-all was waited for in the pair */
  if (r->trace) trace_slot(r, rk, pair, now);
  for (int q = 0; q <= (pair ? 1 : 0); q++) {
    int send = rk->ps->slots[rk->pc].send;
    if (send >= 0) {
      host_dispatch(r, rk, 1); /* the send's launch */
      struct wl__p2p *out = wl__p2p_get(r, send, rk->e);
      out->from_idx = rk->idx;
      out->send_t0 = rk->slot_t0;
      wl__p2p_join(r, out, 0, now);
    }
    rk->pc++;
  }
  rk->recv_ok = false;
  rk->st = WL__ST_READY;
}

/*
 * An F&B pair's communication stream (Megatron's combined 1F1B and DualPipe issue their
 * dispatches and combines on one communication stream): the deferred all-to-alls run one at a
 * time in issue order; when the one in flight is done the next starts, at the moment this
 * notices it (the driver looks at a rank with deferred all-to-alls after every network event
 * and at every formula collective's end).
 */
static void pump_comm(struct wl__replay *r, struct wl__rank *rk, double now)
{
  for (int i = 0; i < rk->ndq && !r->rc; i++) {
    struct wl__defer *q = &rk->dq[i];
    if (q->done) continue;
    if (q->h < 0) {
      q->t0 = now;
      q->h = wl__join_a2a(r, rk, q->layer, q->mb, (enum wl_a2a_which)q->which, now);
      if (q->h < 0) { /* nothing to move (or a replay error, in r->rc) */
        q->done = true;
        continue;
      }
    }
    if (!sh_done(r, q->h)) return; /* in flight: the stream is busy */
    q->done = true;
  }
}

static int find_deferred(const struct wl__rank *rk, int which)
{
  for (int i = 0; i < rk->ndq; i++)
    if (rk->dq[i].which == which) return i;
  NPU_PANIC("no deferred all-to-all %d", which);
}

/* Deferred all-to-all i is done and was waited for `waited` seconds: the compute beside it pays
 * what it took, and the rest of its time from its start counts as hidden. */
static void finish_deferred(struct wl__replay *r, struct wl__rank *rk, int i, double waited)
{
  struct wl__defer *q = &rk->dq[i];
  if (q->h >= 0) {
    double end = wl__shared_end_s(&r->sh, q->h, r->x);
    if (end > q->t0) rk->res->hidden_s[WL_CAT_EP] += fmax(0, end - q->t0 - waited);
    if (rk->detail) trace_comm(r, rk, WL_DIM_EP, "EP all-to-all", q->t0, end);
    charge_dp(r, rk, q->h, q->t0);
    sh_drop(r, q->h);
  }
  memmove(q, q + 1, (size_t)(rk->ndq - i - 1) * sizeof *q);
  rk->ndq--;
}

/*
 * Activation offload's copies (WL_STEP_OFFLOAD, WL_STEP_RELOAD) on the host link, in closed form:
 * each direction of a device's link (node.host.bandwidth, node.host.latency) carries one copy at
 * a time, started when it is posted and the previous one is done; nothing else shares it. The
 * step waits for the copy in flight of its direction (the part of the copy not under the
 * compute counts as offload time, the rest as hidden), then posts its own. True when the stream
 * now waits (the rank runs on at run_end).
 */
static bool host_copy(struct wl__replay *r, struct wl__rank *rk, const struct wl_step *s, double now)
{
  bool out = s->kind == WL_STEP_OFFLOAD;
  double *end = out ? &rk->d2h_end : &rk->h2d_end, *dur = out ? &rk->d2h_dur : &rk->h2d_dur;
  double bytes = out ? s->u.offload.bytes : s->u.reload.next, t = now;
  if (out || s->u.reload.wait) { /* the copy in flight */
    t = fmax(now, *end);
    rk->res->cat_s[WL_CAT_OFFLOAD] += t - now;
    rk->res->hidden_s[WL_CAT_OFFLOAD] += fmax(0, *dur - (t - now));
    *dur = 0;
  }
  if (bytes > 0) {
    const struct arch_node *nd = &r->job->sys.node;
    *dur = nd->host.latency_s + bytes / nd->host.bandwidth_bytes_per_s;
    *end = t + *dur;
  }
  if (t <= now) return false;
  if (rk->detail) npu_trace_add(r->trace, rk->idx, 1, out ? "wait offload" : "wait reload", now, t - now);
  rk->run_end = t;
  rk->st = WL__ST_RUN;
  return true;
}

/* Run the current slot's steps from sk at `now` until one needs time or a collective. */
static void run_steps(struct wl__replay *r, struct wl__rank *rk, double now)
{
  for (;;) {
    if (r->rc) return;
    if (rk->sk == rk->nsteps) {
      end_slot(r, rk, now);
      return;
    }
    const struct wl_step *s = &rk->steps[rk->sk];
    switch ((enum wl_step_kind)s->kind) {
    case WL_STEP_SEG:
    case WL_STEP_EXPERTS: {
      double end;
      if (s->kind == WL_STEP_SEG) {
        const struct wl_seg *sg = s->u.seg.seg;
        end = stream_end(r, rk, now, sg->time_s, sg->host_lead_s, sg->launches, sg->dp_loss);
        add_seg(rk, sg);
        if (rk->detail) trace_seg(r, rk, sg, end);
      } else { /* the experts' model FLOPs are not counted per rank (the model's formula has
                  them); what recomputation reruns is (HFU) */
        int layer = s->u.experts.layer, m = step_mb(rk, s);
        enum wl_expert_pass pass = (enum wl_expert_pass)s->u.experts.pass;
        double dev = wl_program_expert_s(r->prog, layer, m, rk->e, pass);
        if (s->u.experts.rerun) rk->res->flops += wl_program_expert_rc_flops(r->prog, layer, m, rk->e, WL_EXPERT_RC_RERUN);
        if (pass == WL_EXPERT_BI) rk->res->flops += wl_program_expert_rc_flops(r->prog, layer, m, rk->e, WL_EXPERT_RC_ACT);
        rk->res->cat_s[WL_CAT_GEMM] += dev;
        /* three grouped launches: up, activation, down */
        end = stream_end(r, rk, now, dev, wl__host_lead_equal(dev, 3, r->host_d), 3, r->prog->dp_loss);
      }
      double d = end - now;
      if (rk->detail && d > 0 && s->kind == WL_STEP_EXPERTS) npu_trace_add(r->trace, rk->idx, 0, "experts", now, d);
      rk->run_end = now + d;
      rk->sk++;
      rk->st = WL__ST_RUN;
      return;
    }
    case WL_STEP_A2A: {
      host_dispatch(r, rk, 1);
      if (s->u.a2a.defer) { /* onto the pair's communication stream; waited for by its WL_STEP_A2A_WAIT */
        NPU_ASSERT(rk->ndq < (int)(sizeof rk->dq / sizeof rk->dq[0]));
        rk->dq[rk->ndq++] = (struct wl__defer){.layer = s->u.a2a.layer, .mb = step_mb(rk, s), .which = s->u.a2a.which,
                                               .h = -1}; /* started (t0) by pump_comm */
        pump_comm(r, rk, now);
        rk->sk++;
        break;
      }
      int h = wl__join_a2a(r, rk, s->u.a2a.layer, step_mb(rk, s), (enum wl_a2a_which)s->u.a2a.which, now);
      rk->sk++;
      if (h < 0) return;
      if (!sh_done(r, h)) {
        wait_on(rk, h, WL_CAT_EP, now);
        return;
      }
      if (rk->detail) trace_comm(r, rk, WL_DIM_EP, "EP all-to-all", now, wl__shared_end_s(&r->sh, h, r->x));
      sh_drop(r, h);
      break;
    }
    case WL_STEP_A2A_WAIT: /* on_wait_a2a, at once: done already, or waited for */
      rk->wait_which = s->u.a2a_wait.which;
      rk->since = now;
      rk->st = WL__ST_WAIT_A2A;
      return;
    case WL_STEP_BUCKET:
      host_dispatch(r, rk, 1);
      wl__post_bucket(r, rk, s->u.bucket.params, now);
      wl__post_ebucket(r, rk, s->u.bucket.eparams, now);
      rk->sk++;
      break;
    case WL_STEP_GATHER: {
      host_dispatch(r, rk, 1);
      /* piece q's gather (posted by piece q-1, or now for the first), then piece q+1's */
      bool first = s->u.gather.piece == 0;
      int h = first ? wl__post_gather(r, rk, s->u.gather.params, now) : rk->next_gather;
      double t0 = first ? now : rk->gather_t;
      rk->next_gather = -1;
      if (s->u.gather.next) { /* the next piece's gather step follows this piece's compute */
        for (int i = rk->sk + 1; i < rk->nsteps; i++)
          if (rk->steps[i].kind == WL_STEP_GATHER) {
            rk->next_gather = wl__post_gather(r, rk, rk->steps[i].u.gather.params, now);
            rk->gather_t = now;
            break;
          }
      }
      rk->sk++;
      if (h < 0) break;
      if (!sh_done(r, h)) {
        wait_on(rk, h, WL_CAT_DP, now);
        rk->wait_t0 = t0;
        return;
      }
      dp_done(r, rk, h, t0);
      sh_drop(r, h);
      break;
    }
    case WL_STEP_OFFLOAD:
    case WL_STEP_RELOAD:
      rk->sk++;
      if (host_copy(r, rk, s, now)) return;
      break;
    default: NPU_PANIC("bad step %d", s->kind);
    }
  }
}
/* ------------------------------------------------------------------ the state machine */

/* Each phase function handles one state at `now`: true to look at the rank again at once (its
 * state changed), false when it waits (for time, a transfer or a collective). */

static bool on_run(struct wl__replay *r, struct wl__rank *rk, double now)
{
  if (rk->run_end > now + EPS) return false;
  rk->st = WL__ST_STEP;
  run_steps(r, rk, rk->run_end > now ? rk->run_end : now);
  return rk->st != WL__ST_STEP;
}

static bool on_step(struct wl__replay *r, struct wl__rank *rk, double now)
{
  run_steps(r, rk, now);
  return rk->st != WL__ST_STEP;
}

static bool on_wait_coll(struct wl__replay *r, struct wl__rank *rk, double now)
{
  if (!sh_done(r, rk->waitsh)) return false;
  rk->res->cat_s[rk->waitcat] += now - rk->since;
  if (rk->detail && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait collective", rk->since, now - rk->since);
  if (rk->detail && rk->waitcat == WL_CAT_EP)
    trace_comm(r, rk, WL_DIM_EP, "EP all-to-all", rk->since, wl__shared_end_s(&r->sh, rk->waitsh, r->x));
  if (rk->waitcat == WL_CAT_DP) dp_done(r, rk, rk->waitsh, rk->wait_t0);
  sh_drop(r, rk->waitsh);
  rk->st = WL__ST_STEP;
  return true;
}

static bool on_wait_a2a(struct wl__replay *r, struct wl__rank *rk, double now)
{
  pump_comm(r, rk, now);
  int i = find_deferred(rk, rk->wait_which);
  if (!rk->dq[i].done) return false;
  rk->res->cat_s[WL_CAT_EP] += now - rk->since;
  if (rk->detail && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait collective", rk->since, now - rk->since);
  finish_deferred(r, rk, i, now - rk->since);
  rk->sk++;
  rk->st = WL__ST_STEP;
  return true;
}

/* Between slots: after the last, post the buckets not posted yet and wait for them; else wait
 * for the next slot's inputs (and its partner's), then start it. */
static bool on_ready(struct wl__replay *r, struct wl__rank *rk, double now)
{
  const struct wl_job *j = r->job;
  const struct wl_program *pg = r->prog;
  if (rk->pc == rk->ps->nslots) {
    if (!j->plan.overlap_grad_reduce && !wl_plan_zero3(&j->plan)) {
      wl__post_bucket(r, rk, pg->stage_params[rk->s], now);
      wl__post_ebucket(r, rk, pg->stage_eparams[rk->s], now);
    }
    rk->since = now;
    rk->st = WL__ST_WAIT_DP;
    return true;
  }
  bool pair = rk->ps->slots[rk->pc].slot.overlap && rk->pc + 1 < rk->ps->nslots;
  if (!rk->recv_ok) {
    for (int q = 0; q <= (pair ? 1 : 0); q++) { /* the inputs of the slot and its partner */
      int recv = rk->ps->slots[rk->pc + (size_t)q].recv;
      if (recv < 0) continue;
      struct wl__p2p *in = wl__p2p_get(r, recv, rk->e);
      if (r->rc) return false;
      double end;
      if (wl__p2p_done(r, in, &end)) { /* arrived while the rank computed: hidden */
        if (!in->counted) rk->res->hidden_s[WL_CAT_PP] += wl__p2p_span_s(in, end);
        if (!in->counted && rk->detail) trace_comm(r, rk, WL_DIM_PP, "PP receive", in->send_s, end);
        in->counted = true;
        if (r->trace && !in->traced) { /* an arrow from the sending slot to the slot it feeds */
          unsigned long long id = (unsigned long long)(in - r->p2p) + 1;
          npu_trace_flow(r->trace, in->from_idx, 3, "send", fmax(in->send_t0, in->send_s - 1e-9), id, false);
          npu_trace_flow(r->trace, rk->idx, 3, "send", now, id, true);
          in->traced = true;
        }
        continue;
      }
      wl__p2p_join(r, in, 1, now);
      rk->wait = (int)(in - r->p2p);
      rk->since = now;
      rk->st = WL__ST_WAIT_RECV;
      return true;
    }
    rk->recv_ok = true;
    for (int q = 0; q <= (pair ? 1 : 0); q++) /* the receives' launches */
      if (rk->ps->slots[rk->pc + (size_t)q].recv >= 0) host_dispatch(r, rk, 1);
  }
  start_slot(rk, now);
  return true;
}

static bool on_wait_recv(struct wl__replay *r, struct wl__rank *rk, double now)
{
  struct wl__p2p *p = &r->p2p[rk->wait];
  double end;
  if (!wl__p2p_done(r, p, &end)) return false;
  double sent = p->send_s > rk->since ? p->send_s : rk->since, waited = (now > sent ? now : sent) - sent;
  rk->res->cat_s[WL_CAT_BUBBLE] += sent - rk->since;
  rk->res->cat_s[WL_CAT_PP] += waited; /* now == end unless woken late */
  rk->res->hidden_s[WL_CAT_PP] += fmax(0, wl__p2p_span_s(p, end) - waited);
  if (rk->detail) trace_comm(r, rk, WL_DIM_PP, "PP receive", p->send_s, end);
  p->counted = true;
  if (rk->detail && now > rk->since) npu_trace_add(r->trace, rk->idx, 1, "wait input", rk->since, now - rk->since);
  rk->st = WL__ST_READY; /* then the partner's input, if any */
  return true;
}

/* Waited-for collective i of rk, posted to finished, on the first data-parallel lane it does
 * not overlap (tid 2, then 4 to 18: buckets in flight together side by side, as slices on one
 * thread must nest; 4 lanes left the default scenario's buckets overlapping on the first). */
static void trace_dp(struct wl__replay *r, struct wl__rank *rk, int i)
{
  double end = wl__shared_end_s(&r->sh, rk->ids[i], r->x), t0 = rk->ids_t[i];
  if (end != end) return;
  int lane = take_lane(rk->dp_lane_end, (int)(sizeof rk->dp_lane_end / sizeof rk->dp_lane_end[0]), t0, end);
  int tid = lane ? 3 + lane : 2;
  if (lane && !(rk->dp_named & 1u << lane)) {
    char name[32];
    snprintf(name, sizeof name, "data parallel %d", lane + 1);
    npu_trace_name(r->trace, rk->idx, tid, name);
    rk->dp_named |= 1u << lane;
  }
  npu_trace_add(r->trace, rk->idx, tid, rk->ids_name[i], t0, fmax(0, end - t0));
}

/* Whether every collective in rk->ids is done; if so they are dropped. */
static bool ids_done(struct wl__replay *r, struct wl__rank *rk)
{
  for (int i = 0; i < rk->nids; i++)
    if (!sh_done(r, rk->ids[i])) return false;
  for (int i = 0; rk->detail && i < rk->nids; i++) trace_dp(r, rk, i);
  for (int i = 0; i < rk->nids; i++) dp_done(r, rk, rk->ids[i], rk->ids_t[i]);
  for (int i = 0; i < rk->nids; i++) sh_drop(r, rk->ids[i]);
  rk->nids = 0;
  return true;
}

static bool on_wait_dp(struct wl__replay *r, struct wl__rank *rk, double now)
{
  if (!ids_done(r, rk)) return false;
  const struct wl_seg *opt = &r->prog->optim[rk->s];
  rk->res->cat_s[WL_CAT_DP] += now - rk->since;
  add_seg(rk, opt);
  /* the gradient norm's clipping reads it on the host (Megatron's clip_grad_norm .item()): the
   * host waits for the stream, then dispatches the optimizer's kernels */
  if (rk->host < now) rk->host = now;
  rk->run_end = stream_end(r, rk, now, opt->time_s, opt->host_lead_s, opt->launches, opt->dp_loss);
  if (rk->detail) npu_trace_add(r->trace, rk->idx, 0, "optimizer", now, rk->run_end - now);
  rk->st = WL__ST_OPT;
  return true;
}

/* After the optimizer: with ZeRO 1-2 and no overlap, gather the parameters. */
static bool on_opt(struct wl__replay *r, struct wl__rank *rk, double now)
{
  const struct wl_job *j = r->job;
  if (rk->run_end > now + EPS) return false;
  double t = pay_debt(rk, rk->run_end > now ? rk->run_end : now);
  if (j->plan.zero >= 1 && !wl_plan_zero3(&j->plan) && !j->plan.overlap_param_gather && j->plan.dp * j->plan.cp > 1) {
    wl__post_param_gathers(r, rk, t);
    rk->since = t;
    rk->st = WL__ST_WAIT_AG;
  } else {
    rk->res->end_s = t;
    dp_hidden(rk);
    rk->st = WL__ST_DONE;
  }
  return true;
}

static bool on_wait_ag(struct wl__replay *r, struct wl__rank *rk, double now)
{
  if (!ids_done(r, rk)) return false;
  rk->res->cat_s[WL_CAT_DP] += now - rk->since;
  rk->res->end_s = pay_debt(rk, now);
  dp_hidden(rk);
  rk->st = WL__ST_DONE;
  return true;
}

static bool on_done(struct wl__replay *r, struct wl__rank *rk, double now)
{
  (void)r, (void)rk, (void)now;
  return false;
}

/* The phase function of each state. */
static bool (*const phases[WL__ST_COUNT])(struct wl__replay *, struct wl__rank *, double) = {
    [WL__ST_READY] = on_ready,         [WL__ST_WAIT_RECV] = on_wait_recv, [WL__ST_STEP] = on_step,
    [WL__ST_RUN] = on_run,             [WL__ST_WAITC] = on_wait_coll,     [WL__ST_WAIT_A2A] = on_wait_a2a,
    [WL__ST_WAIT_DP] = on_wait_dp,
    [WL__ST_OPT] = on_opt,             [WL__ST_WAIT_AG] = on_wait_ag,     [WL__ST_DONE] = on_done,
};

/* Move rank rk on at `now` as far as it goes without waiting. */
static void advance(struct wl__replay *r, struct wl__rank *rk, double now)
{
  while (!r->rc && phases[rk->st](r, rk, now)) {}
}
/* ------------------------------------------------------------------ set-up */

/* Cost each memoised collective of the program alone on the first stage's group (its links are
 * the same class for every stage); sequential, before the step starts. */
static int probe_colls(struct wl__replay *r, struct wl_program *pg)
{
  for (int i = 0; i < pg->ncolls; i++) {
    const struct wl_coll *c = &pg->colls[i];
    bool etp = c->dim == WL_GROUP_ETP;
    int n = etp ? pg->plan.etp : wl_plan_dim(&pg->plan, (enum wl_dim)c->dim);
    int *ranks = npu_xmalloc((size_t)n * sizeof *ranks);
    if (etp)
      for (int k = 0; k < n; k++) ranks[k] = wl_plan_expert_rank(&pg->plan, 0, k, 0, 0);
    else
      wl_plan_group(&pg->plan, 0, (enum wl_dim)c->dim, ranks);
    struct ic_comm comm;
    const char *key = etp ? "plan.etp" : c->dim == WL_DIM_CP ? "plan.cp" : "plan.tp";
    int rc = ic_comm_init(&comm, ranks, n, r->topo, key, r->diag);
    free(ranks);
    if (rc) return rc;
    int id = wl__start_coll(r, &comm, c->op, c->bytes, NULL);
    if (id < 0) {
      ic_comm_release(&comm);
      return r->rc;
    }
    ic_exec_join_all(r->x, id, npu_engine_clock());
    ic_exec_run(r->x);
    struct ic_result res;
    ic_exec_result(r->x, id, &res);
    wl_program_set_coll_time(pg, i, res.time_s, ic_algo_name(res.plan.algo));
    ic_exec_release(r->x, id);
    ic_comm_release(&comm);
  }
  wl_program_sum_segments(pg);
  return 0;
}

static void init_ranks(struct wl__replay *r)
{
  r->rk = npu_xcalloc((size_t)r->nr, sizeof *r->rk);
  r->host_d = wl__host_dispatch_s(r->prog);
  for (int i = 0; i < r->nr; i++) {
    struct wl__rank *rk = &r->rk[i];
    rk->s = i / r->E;
    rk->e = i % r->E;
    rk->idx = i;
    /* a large step's trace keeps the kernels, waits and buckets of each stage's first EP rank */
    rk->detail = r->trace && (r->job->run.trace_detail == WL_TRACE_ALL || r->nr <= 64 || rk->e == 0);
    if (r->trace) { /* the memory counter's parts (trace_slot) */
      struct wl_mem m;
      wl_memory_stage(&r->job->model, &r->job->plan, rk->s, &m);
      rk->mem_static_bytes = m.total_bytes - m.activations_bytes;
      rk->mem_unit_bytes = m.inflight > 0 ? m.activations_bytes / m.inflight : 0;
    }
    rk->ps = &r->prog->stages[rk->s];
    rk->next_gather = -1;
    rk->res = &r->res->stages[i];
    rk->res->stage = rk->s;
    rk->res->ep = rk->e;
  }
}

/* ------------------------------------------------------------------ the driver actor */

/* When rank rk next has something due by itself (compute ending), or INFINITY. */
static double own_time(const struct wl__rank *rk)
{
  return rk->st == WL__ST_RUN || rk->st == WL__ST_OPT ? rk->run_end : INFINITY;
}

/* Whether rk waits for something only a flow's completion can end. */
static bool waits_on_flows(const struct wl__replay *r, const struct wl__rank *rk)
{
  switch (rk->st) {
  case WL__ST_WAITC: return r->sh.v[rk->waitsh].formula_s < 0;
  case WL__ST_WAIT_A2A: return true;
  case WL__ST_WAIT_RECV: return r->p2p[rk->wait].n > 0;
  case WL__ST_WAIT_DP:
  case WL__ST_WAIT_AG: return true;
  default: return false;
  }
}

/* Let the executor catch up to now; whether any of its events (a flow's start, a latency, a
 * delay) fell due, which may have ended a collective or a transfer. */
static bool exec_catch_up(struct wl__replay *r, double now)
{
  bool due = ic_exec_next_event_s(r->x) <= now + EPS;
  ic_exec_advance(r->x, now);
  return due;
}

static void step_rank(struct wl__replay *r, struct wl__rank *rk, double now)
{
  bool was_done = rk->st == WL__ST_DONE;
  if (rk->ndq) pump_comm(r, rk, now);
  advance(r, rk, now);
  if (!was_done && rk->st == WL__ST_DONE) r->ndone++;
  double t = own_time(rk);
  if (isfinite(t)) wl__wake_at(r, rk->idx, t);
}

/* Phase: wait for the network or the next timer, whichever comes first; *now is the clock after
 * it. Whether an executor event happened (a flow ended, or one of its timers fell due). */
static bool poll_network(struct wl__replay *r, double *now)
{
  bool event = exec_catch_up(r, *now);
  double next = ic_exec_next_event_s(r->x);
  if (r->nheap && r->heap[0].t < next) next = r->heap[0].t;
  struct npu_xfer *const *xs;
  size_t n = ic_exec_xfers(r->x, &xs);
  if (n) {
    ssize_t k = npu_xfer_wait_any(xs, n, isfinite(next) ? (next > *now ? next - *now : 0) : -1);
    *now = npu_engine_clock();
    if (k >= 0) ic_exec_xfer_done(r->x, (size_t)k, *now);
    event |= k >= 0;
    event |= ic_exec_reap(r->x, *now) > 0;
  } else if (isfinite(next)) {
    if (next > *now) npu_engine_sleep(next - *now);
    *now = npu_engine_clock();
  } else if (!ic_exec_pending(r->x)) {
    r->rc = npu_diag_set(r->diag, r->job->path, 0, "plan.schedule",
                         "the step cannot finish: every rank waits (a schedule or replay bug)");
    return false;
  }
  return event | exec_catch_up(r, *now);
}

/* Phase: the ranks whose own time (compute, a formula transfer) has come. */
static void run_timers(struct wl__replay *r, double now)
{
  while (r->nheap && r->heap[0].t <= now + EPS) {
    struct wl__wake w = wake_pop(r);
    step_rank(r, &r->rk[w.idx], now);
  }
}

/* Phase: after an executor event, the ranks waiting on flows (a collective's end may come from
 * a flow, a latency or a delay of the executor). */
static void run_flow_waiters(struct wl__replay *r, double now)
{
  for (int i = 0; i < r->nr; i++) {
    struct wl__rank *rk = &r->rk[i];
    if (waits_on_flows(r, rk))
      step_rank(r, rk, now);
    else if (rk->ndq) /* computing: only its communication stream may move (its timer wakes it) */
      pump_comm(r, rk, now);
  }
}

/*
 * The actor: probe the memoised collectives, set up, then the event loop. Ranks are looked at
 * again when their own compute ends (the heap), when a formula transfer they wait for ends
 * (woken by whoever learned its end), and after any flow completes (those waiting on flows).
 */
static void drive(void *arg)
{
  struct wl__replay *r = arg;
  r->x = ic_exec_create(r->topo, &r->icp);
  if ((r->rc = probe_colls(r, r->res->program))) return;
  double t0 = npu_engine_clock();
  r->res->probe_s = t0;
  if ((r->rc = wl__build_comms(r))) return;
  init_ranks(r);
  for (int i = 0; i < r->nr; i++) step_rank(r, &r->rk[i], t0);
  size_t slots = 0;
  for (int i = 0; i < r->nr; i++) slots += r->rk[i].ps->nslots;
  for (uint64_t iter = 0; !r->rc && r->ndone < r->nr; iter++) {
    if (r->job->progress && iter % 1024 == 0) { /* schedule slots started over every rank */
      size_t done = 0;
      for (int i = 0; i < r->nr; i++) done += r->rk[i].pc;
      npu_progress_note(r->job->progress, "replay", (double)done, (double)slots);
    }
    double now = npu_engine_clock();
    bool event = poll_network(r, &now);
    if (r->rc) break;
    if (event && r->nchains) wl__pump_chains(r, now); /* a first phase may have ended */
    run_timers(r, now);
    if (event) run_flow_waiters(r, now);
  }
  for (int i = 0; i < r->nr; i++) r->res->stages[i].end_s -= t0; /* the step starts at 0 */
}

/* ------------------------------------------------------------------ entry points */

static void trace_tracks(const struct wl__replay *r)
{
  for (int i = 0; i < r->nr; i++) {
    char name[64];
    if (r->E > 1) snprintf(name, sizeof name, "stage %d, EP rank %d", i / r->E, i % r->E);
    else snprintf(name, sizeof name, "stage %d", i);
    npu_trace_name(r->trace, i, -1, name);
    npu_trace_name(r->trace, i, 0, "compute");
    npu_trace_name(r->trace, i, 1, "waits");
    npu_trace_name(r->trace, i, 2, "data parallel");
    npu_trace_name(r->trace, i, 3, "micro-batches");
  }
}

static void rp_release(struct wl__replay *r)
{
  if (r->x) ic_exec_destroy(r->x);
  free(r->kargs);
  free(r->item_t0);
  for (int i = 0; r->rk && i < r->nr; i++) {
    free(r->rk[i].ids);
    free(r->rk[i].ids_t);
    free(r->rk[i].ids_name);
    free(r->rk[i].busy);
    free(r->rk[i].dpspan);
  }
  free(r->rk);
  free(r->heap);
  wl__shared_release(&r->sh);
  wl__comms_release(r);
  wl__p2p_release(r);
  ic_topo_destroy(r->topo);
}

static void result_init(struct wl_result *res, struct wl_program *p)
{
  memset(res, 0, sizeof *res);
  res->program = p;
  res->kernels = p->kernels;
  res->nkernels = p->nkernels;
  res->colls = p->colls;
  res->ncolls = p->ncolls;
  res->kernels_costed = p->kernels_costed;
  res->kernel_cache_hits = p->kernel_cache_hits;
  res->nstages = p->nranks;
  res->ep = p->E;
  res->stages = npu_xcalloc((size_t)p->nranks, sizeof *res->stages);
}

int wl_replay_program(struct wl_program *p, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  const struct wl_job *job = p->job;
  result_init(res, p);
  struct wl__replay r = {.job = job, .prog = p, .res = res, .trace = trace, .diag = diag};
  r.pp = p->pp;
  r.mb = p->mb;
  r.E = p->E;
  r.edp = p->edp;
  r.nr = p->nranks;
  r.mchunks = p->mchunks;
  int rc = ic_topo_create(&r.topo, &job->sys, job->devices, diag);
  if (!rc) {
    ic_params_default(&r.icp, &job->sys);
    struct npu_buf xml = {0};
    ic_platform_xml(r.topo, &xml, NULL);
    rc = npu_engine_init(npu_buf_str(&xml), diag);
    npu_buf_release(&xml);
  }
  if (!rc) {
    wl__p2p_init(&r);
    if (trace) trace_tracks(&r);
    npu_engine_spawn("replay", npu_engine_host("r0"), drive, &r);
    npu_engine_run();
    rc = r.rc;
    if (!rc) wl__results_finish(p, res);
  }
  rp_release(&r);
  return rc;
}

int wl_replay(const struct wl_job *job, struct npu_trace *trace, struct wl_result *res, struct npu_diag *diag)
{
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  memset(res, 0, sizeof *res);
  struct wl_program *p;
  int rc = wl_program_create(&p, job, diag); /* kernels and experts costed: before the engine */
  if (!rc) rc = wl_replay_program(p, trace, res, diag);
  clock_gettime(CLOCK_MONOTONIC, &w1);
  res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec);
  return rc;
}

void wl_result_release(struct wl_result *res)
{
  free(res->stages);
  res->stages = NULL;
  wl_program_destroy(res->program);
  res->program = NULL;
  res->kernels = NULL;
  res->colls = NULL;
}
