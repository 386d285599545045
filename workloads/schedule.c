/*
 * schedule.c - pipeline-parallel schedules: per-rank program order, transcribed from the
 * reference implementations (see schedule.h and docs/SCHEDULES.md for sources).
 */
#include "workloads/schedule.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* A growing program. */
struct prog {
  struct wl_slot *s;
  size_t n, cap;
};

static void push(struct prog *p, enum wl_phase ph, int chunk, int mb, int overlap)
{
  if (p->n == p->cap) {
    p->cap = p->cap ? 2 * p->cap : 64;
    p->s = npu_xrealloc(p->s, p->cap * sizeof *p->s);
  }
  p->s[p->n++] = (struct wl_slot){.phase = (uint8_t)ph, .chunk = (uint8_t)chunk,
                                  .mb = (uint32_t)mb, .overlap = (uint8_t)overlap};
}

static int einval(struct npu_diag *diag, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fill diag (key, message) and return NPU_EINVAL: a shape is bad input, not a bad file. */
static int einval(struct npu_diag *diag, const char *key, const char *fmt, ...)
{
  char msg[sizeof diag->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  npu_diag_set(diag, NULL, 0, key, "%s", msg);
  return NPU_EINVAL;
}

/* The shape checks of schedule.h. */
int wl_schedule_check(enum wl_schedule kind, int pp, int vpp, int mb, struct npu_diag *diag)
{
  NPU_ASSERT(kind >= 0 && kind < WL_SCHED_COUNT);
  const char *name = wl_schedule_name(kind);
  if (pp < 1) return einval(diag, "plan.pp", "pp %d must be at least 1", pp);
  if (vpp < 1) return einval(diag, "plan.vpp", "vpp %d must be at least 1", vpp);
  if (mb < 1) return einval(diag, "plan.global_batch", "%d micro-batches per step: need at least 1", mb);
  if (kind == WL_SCHED_INTERLEAVED) {
    if (vpp < 2)
      return einval(diag, "plan.vpp", "vpp %d must be at least 2 for the 'interleaved' schedule", vpp);
    if (vpp > 255) return einval(diag, "plan.vpp", "vpp %d must be at most 255", vpp);
    if (pp < 2) return einval(diag, "plan.pp", "pp %d must be at least 2 for the 'interleaved' schedule", pp);
    if (mb % pp != 0)
      return einval(diag, "plan.global_batch",
                    "pp %d must divide the %d micro-batches per step for the 'interleaved' schedule", pp, mb);
    return 0;
  }
  if (vpp != 1)
    return einval(diag, "plan.vpp",
                  "vpp %d must be 1 for the '%s' schedule (several chunks per rank need 'interleaved')", vpp,
                  name);
  if (kind == WL_SCHED_DUALPIPE) {
    if (pp % 2 != 0) return einval(diag, "plan.pp", "pp %d must be even for the 'dualpipe' schedule", pp);
    if (mb % 2 != 0 || mb < 2 * pp)
      return einval(diag, "plan.global_batch",
                    "%d micro-batches per step: the 'dualpipe' schedule needs an even number, at least "
                    "2 x pp = %d", mb, 2 * pp);
  }
  return 0;
}

/* GPipe (Huang et al. 2019, fig. 2c): all forwards, then all backwards, the last micro-batch's
 * first (autograd runs the backward in reverse order of the forward). */
static void build_gpipe(struct prog *p, int mb)
{
  for (int i = 0; i < mb; i++) push(p, WL_PH_F, 0, i, 0);
  for (int i = mb - 1; i >= 0; i--) push(p, WL_PH_B, 0, i, 0);
}

/* Megatron-LM forward_backward_pipelining_without_interleaving. */
static void build_1f1b(struct prog *p, int pp, int mb, int stage)
{
  int warmup = pp - stage - 1;
  if (warmup > mb) warmup = mb;
  int remaining = mb - warmup;
  for (int i = 0; i < warmup; i++) push(p, WL_PH_F, 0, i, 0);
  for (int i = 0; i < remaining; i++) {
    push(p, WL_PH_F, 0, warmup + i, 0);
    push(p, WL_PH_B, 0, i, 0);
  }
  for (int i = remaining; i < mb; i++) push(p, WL_PH_B, 0, i, 0);
}

/* Megatron-LM forward_backward_pipelining_with_interleaving: the k-th forward (backward) of a
 * rank runs chunk get_model_chunk_id(k) on micro-batch get_microbatch_id_in_model_chunk(k). */
static int il_chunk(int k, int pp, int vpp, int forward)
{
  int c = (k % (pp * vpp)) / pp;
  return forward ? c : vpp - c - 1;
}

static int il_mb(int k, int pp, int vpp)
{
  return (k / (pp * vpp)) * pp + k % pp;
}

static void build_interleaved(struct prog *p, int pp, int vpp, int mb, int stage)
{
  int total = mb * vpp, warmup;
  if (mb == pp) {
    warmup = total; /* all_warmup_microbatches: every forward, then every backward */
  } else {
    warmup = (pp - stage - 1) * 2 + (vpp - 1) * pp;
    if (warmup > total) warmup = total;
  }
  int remaining = total - warmup;
  for (int k = 0; k < warmup; k++) push(p, WL_PH_F, il_chunk(k, pp, vpp, 1), il_mb(k, pp, vpp), 0);
  for (int k = 0; k < remaining; k++) {
    int kf = k + warmup;
    push(p, WL_PH_F, il_chunk(kf, pp, vpp, 1), il_mb(kf, pp, vpp), 0);
    push(p, WL_PH_B, il_chunk(k, pp, vpp, 0), il_mb(k, pp, vpp), 0);
  }
  for (int k = remaining; k < total; k++) push(p, WL_PH_B, il_chunk(k, pp, vpp, 0), il_mb(k, pp, vpp), 0);
}

void wl_schedule_pair_fb(struct wl_slot *s, size_t n)
{
  for (size_t i = 0; i + 1 < n; i++) {
    if (s[i].phase != WL_PH_B || s[i + 1].phase != WL_PH_F) continue;
    struct wl_slot b = s[i];
    s[i] = s[i + 1];
    s[i].overlap = 1;
    s[i + 1] = b;
    i++;
  }
}

/* ZB-H1: the handcrafted schedule of the zero-bubble paper (sail-sg repository, branch arxiv,
 * efficiency.py get_hand_schedule with warmup_c = 1): 1F1B with each backward split into B and
 * W; rank `stage` defers its first `stage` W passes, which then trail its program (FIFO). */
static void build_zb_h1(struct prog *p, int pp, int mb, int stage)
{
  int warmup = pp - stage - 1;
  if (warmup > mb) warmup = mb;
  int defer = stage < mb ? stage : mb, w = 0;
  for (int i = 0; i < warmup; i++) push(p, WL_PH_F, 0, i, 0);
  for (int i = 0; i < mb; i++) {
    if (warmup + i < mb) push(p, WL_PH_F, 0, warmup + i, 0);
    push(p, WL_PH_BI, 0, i, 0);
    if (i >= defer) push(p, WL_PH_W, 0, w++, 0);
  }
  while (w < mb) push(p, WL_PH_W, 0, w++, 0);
}

/*
 * DualPipe, deepseek-ai/DualPipe dualpipe.py DualPipe.step(), its eight steps. The code's
 * "phase" is local: on the second half of the ranks phase 0 is the reverse direction, so the
 * chunk is phase ^ second_half. Forwards and backwards of a chunk take its micro-batches in
 * order; deferred weight gradients are a FIFO (WeightGradStore).
 */
struct dp_state {
  struct prog *p;
  int sh, half_mb;
  int fc[2], bc[2];
  int *wq, wq_head, wq_tail; /* FIFO of micro-batches waiting for their W (the chunk follows) */
};

static void dp_f(struct dp_state *d, int phase, int overlap)
{
  int c = phase ^ d->sh;
  push(d->p, WL_PH_F, c, c * d->half_mb + d->fc[c]++, overlap);
}

static void dp_b(struct dp_state *d, int phase, int zb)
{
  int c = phase ^ d->sh, m = c * d->half_mb + d->bc[c]++;
  push(d->p, zb ? WL_PH_BI : WL_PH_B, c, m, 0);
  if (zb) d->wq[d->wq_tail++] = m;
}

static void dp_w(struct dp_state *d)
{
  NPU_ASSERT(d->wq_head < d->wq_tail);
  int m = d->wq[d->wq_head++];
  push(d->p, WL_PH_W, m >= d->half_mb, m, 0);
}

static void build_dualpipe(struct prog *p, int pp, int mb, int stage)
{
  int half_ranks = pp / 2, half_rank = stage < pp - 1 - stage ? stage : pp - 1 - stage;
  bool middle = stage == half_ranks - 1 || stage == half_ranks;
  struct dp_state d = {.p = p, .sh = stage >= half_ranks, .half_mb = mb / 2};
  d.wq = npu_xmalloc((size_t)mb * sizeof *d.wq);

  /* Step 1: nF0 */
  for (int i = 0; i < (half_ranks - half_rank - 1) * 2; i++) dp_f(&d, 0, 0);
  /* Step 2: nF0F1 */
  for (int i = 0; i < half_rank + 1; i++) {
    dp_f(&d, 0, 0);
    dp_f(&d, 1, 0);
  }
  /* Step 3: nB1W1F1 (zero bubble) */
  for (int i = 0; i < half_ranks - half_rank - 1; i++) {
    dp_b(&d, 1, 1);
    dp_w(&d);
    dp_f(&d, 1, 0);
  }
  /* Step 4 (main): nF0B1F1B0; the middle ranks do not overlap their first pair */
  for (int i = 0; i < d.half_mb - pp + half_rank + 1; i++) {
    dp_f(&d, 0, !(i == 0 && middle));
    dp_b(&d, 1, 0);
    dp_f(&d, 1, 1);
    dp_b(&d, 0, 0);
  }
  /* Step 5: nB1F1B0 */
  for (int i = 0; i < half_ranks - half_rank - 1; i++) {
    dp_b(&d, 1, 0);
    dp_f(&d, 1, 1);
    dp_b(&d, 0, 0);
  }
  /* Step 6: nB1B0, zero bubble from the middle on */
  int step6 = half_rank + 1, zb = 0;
  for (int i = 0; i < step6; i++) {
    if (i == step6 / 2 && half_rank % 2 == 1) zb = 1;
    dp_b(&d, 1, zb);
    if (i == step6 / 2 && half_rank % 2 == 0) zb = 1;
    dp_b(&d, 0, zb);
  }
  /* Step 7: nWB0 (zero bubble) */
  for (int i = 0; i < half_ranks - half_rank - 1; i++) {
    dp_w(&d);
    dp_b(&d, 0, 1);
  }
  /* Step 8: nW */
  for (int i = 0; i < half_rank + 1; i++) dp_w(&d);

  NPU_ASSERT(d.wq_head == d.wq_tail);
  NPU_ASSERT(d.fc[0] == d.half_mb && d.fc[1] == d.half_mb);
  NPU_ASSERT(d.bc[0] == d.half_mb && d.bc[1] == d.half_mb);
  free(d.wq);
}

int wl_schedule_build(enum wl_schedule kind, int pp, int vpp, int mb, int stage,
                      struct wl_slot **out, size_t *n, struct npu_diag *diag)
{
  *out = NULL;
  *n = 0;
  int rc = wl_schedule_check(kind, pp, vpp, mb, diag);
  if (rc) return rc;
  NPU_ASSERT(stage >= 0 && stage < pp);
  struct prog p = {0};
  switch (kind) {
  case WL_SCHED_GPIPE: build_gpipe(&p, mb); break;
  case WL_SCHED_1F1B: build_1f1b(&p, pp, mb, stage); break;
  case WL_SCHED_INTERLEAVED: build_interleaved(&p, pp, vpp, mb, stage); break;
  case WL_SCHED_ZB_H1: build_zb_h1(&p, pp, mb, stage); break;
  case WL_SCHED_DUALPIPE: build_dualpipe(&p, pp, mb, stage); break;
  default: NPU_PANIC("unknown schedule %d", (int)kind);
  }
  *out = p.s;
  *n = p.n;
  return 0;
}

int wl_schedule_chunks(enum wl_schedule kind, int vpp)
{
  switch (kind) {
  case WL_SCHED_INTERLEAVED: return vpp;
  case WL_SCHED_DUALPIPE: return 2;
  default: return 1;
  }
}

int wl_schedule_model_chunk(enum wl_schedule kind, int pp, int vpp, int stage, int c)
{
  NPU_ASSERT(stage >= 0 && stage < pp);
  NPU_ASSERT(c >= 0 && c < wl_schedule_chunks(kind, vpp));
  switch (kind) {
  case WL_SCHED_INTERLEAVED: return c * pp + stage;
  case WL_SCHED_DUALPIPE: return c == 0 ? stage : pp - 1 - stage;
  default: return stage;
  }
}

void wl_schedule_locate(enum wl_schedule kind, int pp, int vpp, int mb, int m, int k,
                        int *stage, int *chunk)
{
  NPU_ASSERT(m >= 0 && m < mb);
  switch (kind) {
  case WL_SCHED_INTERLEAVED:
    NPU_ASSERT(k >= 0 && k < pp * vpp);
    *stage = k % pp;
    *chunk = k / pp;
    return;
  case WL_SCHED_DUALPIPE:
    NPU_ASSERT(k >= 0 && k < pp);
    if (m < mb / 2) {
      *stage = k;
      *chunk = 0;
    } else {
      *stage = pp - 1 - k;
      *chunk = 1;
    }
    return;
  default:
    NPU_ASSERT(k >= 0 && k < pp);
    *stage = k;
    *chunk = 0;
    return;
  }
}

int wl_schedule_max_inflight(const struct wl_slot *s, size_t n, int chunks)
{
  int cur = 0, max = 0;
  for (size_t i = 0; i < n; i++) {
    NPU_ASSERT(s[i].chunk < chunks);
    switch (s[i].phase) {
    case WL_PH_F: cur++; break;
    case WL_PH_B:
    case WL_PH_W: cur--; break;
    default: break; /* WL_PH_BI: held until its W */
    }
    if (cur > max) max = cur;
  }
  return max;
}

/* ---- text timeline ---------------------------------------------------------------------- */

static int unit_len(enum wl_phase ph)
{
  return ph == WL_PH_B ? 2 : 1;
}

#define PAIR_LEN 2 /* an overlapped F&B pair: F = 1 and B = 2 run together in 2 units */

/* A slot's key in the end-time tables: model chunk k, micro-batch m. */
#define KEY(k, m) ((size_t)(k) * (size_t)mb + (size_t)(m))

int wl_schedule_ascii(enum wl_schedule kind, int pp, int vpp, int mb, char **out,
                      struct npu_diag *diag)
{
  *out = NULL;
  int rc = wl_schedule_check(kind, pp, vpp, mb, diag);
  if (rc) return rc;
  if (mb > 36)
    return einval(diag, "plan.global_batch", "the timeline draws at most %d micro-batches, got %d", 36, mb);

  int chunks = wl_schedule_chunks(kind, vpp), depth = pp * vpp, width = chunks > 1 ? 3 : 2;
  struct wl_slot **progs = npu_xcalloc((size_t)pp, sizeof *progs);
  size_t *len = npu_xcalloc((size_t)pp, sizeof *len), *pc = npu_xcalloc((size_t)pp, sizeof *pc);
  int *clock = npu_xcalloc((size_t)pp, sizeof *clock);
  int **start = npu_xcalloc((size_t)pp, sizeof *start);
  /* End times of forwards and of (input) backwards per model chunk and micro-batch; -1 unknown. */
  int *fend = npu_xmalloc((size_t)depth * (size_t)mb * sizeof *fend);
  int *bend = npu_xmalloc((size_t)depth * (size_t)mb * sizeof *bend);
  for (size_t i = 0; i < (size_t)depth * (size_t)mb; i++) fend[i] = bend[i] = -1;
  for (int r = 0; r < pp; r++) {
    rc = wl_schedule_build(kind, pp, vpp, mb, r, &progs[r], &len[r], diag);
    NPU_ASSERT(rc == 0);
    start[r] = npu_xmalloc(len[r] * sizeof *start[r]);
  }

  /* Dataflow timing: a rank starts its next slot (or pair) once the rank is free and the
   * slot's inputs are there; repeat until every program is through. */
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; r++) {
      while (pc[r] < len[r]) {
        size_t i = pc[r], cnt = progs[r][i].overlap ? 2 : 1;
        NPU_ASSERT(i + cnt <= len[r]);
        int t = clock[r], ready = 1;
        for (size_t j = i; j < i + cnt && ready; j++) {
          const struct wl_slot *s = &progs[r][j];
          int k = wl_schedule_model_chunk(kind, pp, vpp, r, s->chunk), need = -1;
          if (s->phase == WL_PH_F) {
            need = k == 0 ? 0 : fend[KEY(k - 1, s->mb)];
          } else if (s->phase == WL_PH_W) {
            need = bend[KEY(k, s->mb)];
          } else {
            need = fend[KEY(k, s->mb)];
            if (k < depth - 1 && need >= 0) {
              int b = bend[KEY(k + 1, s->mb)];
              need = b < 0 ? -1 : (b > need ? b : need);
            }
          }
          if (need < 0) ready = 0;
          else if (need > t) t = need;
        }
        if (!ready) break;
        int end = t + (cnt == 2 ? PAIR_LEN : unit_len(progs[r][i].phase));
        for (size_t j = i; j < i + cnt; j++) {
          const struct wl_slot *s = &progs[r][j];
          int k = wl_schedule_model_chunk(kind, pp, vpp, r, s->chunk);
          start[r][j] = cnt == 2 ? t + (int)(j - i) : t;
          if (s->phase == WL_PH_F) fend[KEY(k, s->mb)] = end;
          else if (s->phase != WL_PH_W) bend[KEY(k, s->mb)] = end;
        }
        clock[r] = end;
        pc[r] += cnt;
        progress = true;
      }
    }
  }
  int makespan = 0;
  for (int r = 0; r < pp; r++) {
    NPU_ASSERT(pc[r] == len[r]); /* the schedules are deadlock-free (tested) */
    if (clock[r] > makespan) makespan = clock[r];
  }

  size_t line = 8 + (size_t)makespan * (size_t)width + 1;
  char *buf = npu_xmalloc(line * (size_t)pp + 1), *o = buf;
  static const char letters[] = "FBIW", digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  for (int r = 0; r < pp; r++) {
    char *row = o + snprintf(o, 9, "rank %-2d ", r);
    memset(row, '.', (size_t)makespan * (size_t)width);
    for (size_t j = 0; j < len[r]; j++) {
      const struct wl_slot *s = &progs[r][j];
      bool pair = s->overlap || (j > 0 && progs[r][j - 1].overlap);
      int units = pair ? 1 : unit_len(s->phase);
      char *c = row + (size_t)start[r][j] * (size_t)width;
      memset(c, '-', (size_t)units * (size_t)width);
      c[0] = pair ? (char)(letters[s->phase] - 'A' + 'a') : letters[s->phase];
      if (chunks > 1) *++c = digits[s->chunk];
      c[1] = digits[s->mb];
    }
    o = row + (size_t)makespan * (size_t)width;
    /* trim trailing idle */
    while (o > row && o[-1] == '.') o--;
    *o++ = '\n';
  }
  *o = '\0';

  for (int r = 0; r < pp; r++) {
    free(progs[r]);
    free(start[r]);
  }
  free(progs);
  free(start);
  free(len);
  free(pc);
  free(clock);
  free(fend);
  free(bend);
  *out = buf;
  return 0;
}
