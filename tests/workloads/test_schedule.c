/*
 * test_schedule.c - the pipeline schedules (workloads/schedule.c).
 *
 * 1. Every program is complete (each forward and backward of every micro-batch on every chunk
 *    exactly once, W after its BI, backwards after their forward) and the pipeline built from
 *    them runs to the end: a small dataflow simulator here times every slot with uniform
 *    durations and zero communication, and reports a deadlock if some rank waits forever.
 * 2. With uniform stages the simulated bubble equals the published closed forms, exactly
 *    (integer-valued durations, compared to 1e-9):
 *      GPipe, 1F1B   bubble fraction (pp-1)/(m+pp-1) of the step (GPipe's (K-1)/(M+K-1);
 *                    Narayanan et al. 2021 sec. 2.2.1); F, B = forward and full backward of a
 *                    stage; any F, B.
 *      interleaved   bubble time (pp-1)(F+B)/vpp (Narayanan et al. 2021 sec. 2.2.2); F, B of a
 *                    whole stage (each chunk takes F/vpp, B/vpp); m a multiple of pp.
 *      ZB-H1         bubble (pp-1)(F+B-W) (Qi et al. 2024 sec. 3.1/Table 1) with B = backward
 *                    for inputs only, W = weight gradients; = (pp-1)(F+B'-2W) with B' = B+W the
 *                    full backward (DeepSeek-V3 report Table 2, "ZB1P"). Exact when
 *                    W <= min(F, B) and m >= pp (the paper assumes T_W <= T_F, T_B).
 *      DualPipe      bubble (pp/2-1)(F&B+B-3W) (DeepSeek-V3 report Table 2; DualPipe README)
 *                    with B = full backward, W = weight gradients, F&B = an overlapped forward
 *                    and full-backward pair; the bubble of the step is that of the ranks with
 *                    the most idle time (the middle ones). Exact when the backward for inputs
 *                    takes as long as the forward (B = F + W, as in the report's figure),
 *                    W <= F and B <= F&B <= F+B, for every even pp and even m >= 2 pp.
 * 3. wl_schedule_max_inflight against the papers' activation columns (units: one micro-batch's
 *    activations of one chunk).
 * 4. Bad shapes give NPU_EINVAL and the key and message.
 * 5. Literal programs for small shapes (regressions) and the timelines of docs/SCHEDULES.md.
 */
#include "workloads/schedule.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

TestSuite(schedule, .timeout = 60);

/* ---- helpers ---------------------------------------------------------------------------- */

struct progs {
  enum wl_schedule kind;
  int pp, vpp, mb, chunks;
  struct wl_slot *s[64];
  size_t n[64];
};

static void progs_build(struct progs *P, enum wl_schedule kind, int pp, int vpp, int mb)
{
  cr_assert(pp <= 64);
  P->kind = kind;
  P->pp = pp;
  P->vpp = vpp;
  P->mb = mb;
  P->chunks = wl_schedule_chunks(kind, vpp);
  for (int r = 0; r < pp; r++) {
    struct npu_diag d = {0};
    int rc = wl_schedule_build(kind, pp, vpp, mb, r, &P->s[r], &P->n[r], &d);
    cr_assert_eq(rc, 0, "%s pp=%d vpp=%d mb=%d rank %d: %s", wl_schedule_name(kind), pp, vpp, mb, r, d.msg);
  }
}

static void progs_free(struct progs *P)
{
  for (int r = 0; r < P->pp; r++) free(P->s[r]);
}

/* "F0 F1 B0 ..." (single chunk) or "F1.3 ..." (chunk.mb); an overlapped pair is joined by '+'. */
static char *format_prog(const struct wl_slot *s, size_t n, int chunks)
{
  size_t cap = n * 16 + 1, off = 0;
  char *buf = malloc(cap);
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++) {
    const char sep = i == 0 ? '\0' : (s[i - 1].overlap ? '+' : ' ');
    if (sep) buf[off++] = sep;
    if (chunks > 1)
      off += (size_t)snprintf(buf + off, cap - off, "%c%u.%u", "FBIW"[s[i].phase], s[i].chunk, s[i].mb);
    else
      off += (size_t)snprintf(buf + off, cap - off, "%c%u", "FBIW"[s[i].phase], s[i].mb);
  }
  return buf;
}

/* The program of rank `stage`, paired by wl_schedule_pair_fb (combined 1F1B) when asked: each
 * pair a forward and the backward of another micro-batch or chunk. */
static void check_prog(enum wl_schedule kind, int pp, int vpp, int mb, int stage, bool paired, const char *want)
{
  struct wl_slot *s;
  size_t n;
  struct npu_diag d = {0};
  cr_assert_eq(wl_schedule_build(kind, pp, vpp, mb, stage, &s, &n, &d), 0, "%s", d.msg);
  if (paired) wl_schedule_pair_fb(s, n);
  char *got = format_prog(s, n, wl_schedule_chunks(kind, vpp));
  cr_expect_str_eq(got, want, "%s%s pp=%d vpp=%d mb=%d rank %d", paired ? "paired " : "", wl_schedule_name(kind), pp,
                   vpp, mb, stage);
  for (size_t i = 0; paired && i + 1 < n; i++)
    if (s[i].overlap) {
      cr_expect(s[i].phase == WL_PH_F && s[i + 1].phase == WL_PH_B, "slot %zu", i);
      cr_expect(s[i].mb != s[i + 1].mb || s[i].chunk != s[i + 1].chunk, "slot %zu pairs a micro-batch with itself", i);
    }
  free(got);
  free(s);
}

static void expect_prog(enum wl_schedule kind, int pp, int vpp, int mb, int stage, const char *want)
{
  check_prog(kind, pp, vpp, mb, stage, false, want);
}

/* ---- 1. completeness --------------------------------------------------------------------- */

static void check_complete(const struct progs *P)
{
  const char *name = wl_schedule_name(P->kind);
  size_t cells = (size_t)P->chunks * (size_t)P->mb;
  for (int r = 0; r < P->pp; r++) {
    /* per (chunk, mb): counts of F, B, BI, W */
    int(*cnt)[4] = calloc(cells, sizeof *cnt);
    for (size_t i = 0; i < P->n[r]; i++) {
      const struct wl_slot *s = &P->s[r][i];
      cr_assert_lt(s->phase, 4, "%s rank %d slot %zu: phase %u", name, r, i, s->phase);
      cr_assert_lt(s->chunk, P->chunks, "%s rank %d slot %zu: chunk %u", name, r, i, s->chunk);
      cr_assert_lt(s->mb, (unsigned)P->mb, "%s rank %d slot %zu: mb %u", name, r, i, s->mb);
      int *c = cnt[(size_t)s->chunk * (size_t)P->mb + s->mb];
      switch (s->phase) {
      case WL_PH_F:
        cr_assert_eq(c[0] + c[1] + c[2] + c[3], 0, "%s rank %d: F%u.%u not first", name, r, s->chunk, s->mb);
        break;
      case WL_PH_B:
      case WL_PH_BI:
        cr_assert_eq(c[0], 1, "%s rank %d: backward of %u.%u before its forward", name, r, s->chunk, s->mb);
        cr_assert_eq(c[1] + c[2], 0, "%s rank %d: second backward of %u.%u", name, r, s->chunk, s->mb);
        break;
      case WL_PH_W:
        cr_assert_eq(c[2], 1, "%s rank %d: W%u.%u before its BI", name, r, s->chunk, s->mb);
        cr_assert_eq(c[3], 0, "%s rank %d: second W%u.%u", name, r, s->chunk, s->mb);
        break;
      }
      c[s->phase]++;
      if (s->overlap) {
        cr_assert_eq(P->kind, WL_SCHED_DUALPIPE, "%s: overlapped pair outside DualPipe", name);
        cr_assert(s->phase == WL_PH_F && i + 1 < P->n[r] && P->s[r][i + 1].phase == WL_PH_B &&
                      !P->s[r][i + 1].overlap,
                  "%s rank %d slot %zu: a pair is a forward then a full backward", name, r, i);
      }
    }
    /* each (chunk, mb) that runs here is complete, and nothing else runs here */
    for (int m = 0; m < P->mb; m++) {
      for (int k = 0; k < P->pp * P->vpp; k++) {
        int st, ch;
        wl_schedule_locate(P->kind, P->pp, P->vpp, P->mb, m, k, &st, &ch);
        cr_assert_eq(wl_schedule_model_chunk(P->kind, P->pp, P->vpp, st, ch), k);
        if (st != r) continue;
        int *c = cnt[(size_t)ch * (size_t)P->mb + (size_t)m];
        cr_assert(c[0] == 1 && (c[1] == 1) != (c[2] == 1 && c[3] == 1),
                  "%s pp=%d mb=%d rank %d: micro-batch %d chunk %d has F %d B %d BI %d W %d", name, P->pp,
                  P->mb, r, m, ch, c[0], c[1], c[2], c[3]);
        c[0] = -1000; /* mark as expected */
      }
    }
    for (size_t i = 0; i < cells; i++)
      cr_assert(cnt[i][0] == -1000 || cnt[i][0] + cnt[i][1] + cnt[i][2] + cnt[i][3] == 0,
                "%s rank %d: chunk %zu micro-batch %zu does not belong here", name, r, i / (size_t)P->mb,
                i % (size_t)P->mb);
    free(cnt);
  }
}

/* ---- 1. the dataflow simulator ----------------------------------------------------------- */

struct dur {
  double f, b, bi, w; /* per local chunk: forward, full backward, backward for inputs, weights */
  double fb;          /* an overlapped DualPipe F&B pair */
};

struct simres {
  double makespan;
  double busy[64]; /* per rank: sum of slot (and pair) durations */
};

/*
 * Time every slot: a rank runs its program in order, one slot (or overlapped pair) at a time,
 * starting each when the rank is free and its inputs are done. F of model chunk k needs F of
 * k-1 (same micro-batch); B or BI of k needs its own F and B/BI of k+1; W needs its BI. Zero
 * communication. Fails the test on a deadlock.
 */
static struct simres simulate(const struct progs *P, const struct dur *d)
{
  int depth = P->pp * P->vpp;
  size_t cells = (size_t)depth * (size_t)P->mb;
  double *fend = malloc(cells * sizeof *fend), *bend = malloc(cells * sizeof *bend),
         *biend = malloc(cells * sizeof *biend);
  for (size_t i = 0; i < cells; i++) fend[i] = bend[i] = biend[i] = -1;
  size_t pc[64] = {0};
  double clock[64] = {0};
  struct simres res = {0};

  int progress = 1;
  while (progress) {
    progress = 0;
    for (int r = 0; r < P->pp; r++) {
      for (;;) {
        if (pc[r] == P->n[r]) break;
        size_t first = pc[r], cnt = P->s[r][first].overlap ? 2 : 1;
        double start = clock[r];
        int ok = 1;
        for (size_t j = first; j < first + cnt && ok; j++) {
          const struct wl_slot *s = &P->s[r][j];
          int k = wl_schedule_model_chunk(P->kind, P->pp, P->vpp, r, s->chunk);
          size_t me = (size_t)k * (size_t)P->mb + s->mb;
          double need;
          if (s->phase == WL_PH_F) {
            need = k == 0 ? 0 : fend[me - (size_t)P->mb];
          } else if (s->phase == WL_PH_W) {
            need = biend[me];
          } else {
            need = fend[me];
            if (k + 1 < depth) {
              double nb = bend[me + (size_t)P->mb];
              need = nb < 0 ? -1 : fmax(need, nb);
            }
          }
          if (need < 0) ok = 0;
          else start = fmax(start, need);
        }
        if (!ok) break;
        double len;
        if (cnt == 2) len = d->fb;
        else {
          enum wl_phase ph = P->s[r][first].phase;
          len = ph == WL_PH_F ? d->f : ph == WL_PH_B ? d->b : ph == WL_PH_BI ? d->bi : d->w;
        }
        double end = start + len;
        for (size_t j = first; j < first + cnt; j++) {
          const struct wl_slot *s = &P->s[r][j];
          int k = wl_schedule_model_chunk(P->kind, P->pp, P->vpp, r, s->chunk);
          size_t me = (size_t)k * (size_t)P->mb + s->mb;
          if (s->phase == WL_PH_F) fend[me] = end;
          else if (s->phase == WL_PH_B) bend[me] = end;
          else if (s->phase == WL_PH_BI) bend[me] = biend[me] = end;
        }
        res.busy[r] += len;
        clock[r] = end;
        pc[r] += cnt;
        progress = 1;
      }
    }
  }
  for (int r = 0; r < P->pp; r++) {
    cr_assert_eq(pc[r], P->n[r], "%s pp=%d vpp=%d mb=%d: deadlock, rank %d stuck at slot %zu of %zu",
                 wl_schedule_name(P->kind), P->pp, P->vpp, P->mb, r, pc[r], P->n[r]);
    res.makespan = fmax(res.makespan, clock[r]);
  }
  free(fend);
  free(bend);
  free(biend);
  return res;
}

static double max_bubble(const struct progs *P, const struct simres *s)
{
  double b = 0;
  for (int r = 0; r < P->pp; r++) b = fmax(b, s->makespan - s->busy[r]);
  return b;
}

/* The bubble npusim reports (workloads/results.c, docs/TRAINING.md): the busiest rank's time
 * without work, the least over the ranks. */
static double min_bubble(const struct progs *P, const struct simres *s)
{
  double b = INFINITY;
  for (int r = 0; r < P->pp; r++) b = fmin(b, s->makespan - s->busy[r]);
  return b;
}

#define EPS 1e-9

/* Shapes every schedule accepts, and each schedule's own. */
struct shape {
  int pp, vpp, mb;
};

static const struct shape plain_shapes[] = {
    {1, 1, 1}, {1, 1, 5}, {2, 1, 1}, {2, 1, 2}, {2, 1, 7}, {3, 1, 2}, {3, 1, 9},
    {4, 1, 3}, {4, 1, 4}, {4, 1, 8}, {4, 1, 13}, {8, 1, 8}, {8, 1, 24}, {16, 1, 40},
};
static const struct shape interleaved_shapes[] = {
    {2, 2, 2}, {2, 2, 4}, {2, 3, 6}, {3, 2, 3}, {3, 2, 9}, {4, 2, 4},
    {4, 2, 8}, {4, 3, 12}, {4, 4, 8}, {8, 2, 16}, {8, 4, 8}, {8, 4, 24},
};
static const struct shape dualpipe_shapes[] = {
    {2, 1, 4}, {2, 1, 6}, {4, 1, 8}, {4, 1, 10}, {4, 1, 14}, {6, 1, 12},
    {6, 1, 18}, {8, 1, 16}, {8, 1, 20}, {8, 1, 34}, {16, 1, 32}, {16, 1, 40},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void complete_and_runs(enum wl_schedule kind, const struct shape *sh, size_t n)
{
  const struct dur durs[] = {{1, 2, 1, 1, 2}, {1, 1, 0.5, 0.5, 1.5}, {3, 5, 2, 3, 7}};
  for (size_t i = 0; i < n; i++) {
    struct progs P;
    progs_build(&P, kind, sh[i].pp, sh[i].vpp, sh[i].mb);
    check_complete(&P);
    for (size_t j = 0; j < NELEM(durs); j++) simulate(&P, &durs[j]);
    progs_free(&P);
  }
}

Test(schedule, gpipe_complete_and_deadlock_free)
{
  complete_and_runs(WL_SCHED_GPIPE, plain_shapes, NELEM(plain_shapes));
}

Test(schedule, onef1b_complete_and_deadlock_free)
{
  complete_and_runs(WL_SCHED_1F1B, plain_shapes, NELEM(plain_shapes));
}

Test(schedule, zb_h1_complete_and_deadlock_free)
{
  complete_and_runs(WL_SCHED_ZB_H1, plain_shapes, NELEM(plain_shapes));
}

Test(schedule, interleaved_complete_and_deadlock_free)
{
  complete_and_runs(WL_SCHED_INTERLEAVED, interleaved_shapes, NELEM(interleaved_shapes));
}

Test(schedule, dualpipe_complete_and_deadlock_free)
{
  complete_and_runs(WL_SCHED_DUALPIPE, dualpipe_shapes, NELEM(dualpipe_shapes));
}

/* ---- 2. bubbles against the closed forms ------------------------------------------------- */

/* GPipe and 1F1B: step = (m+pp-1)(F+B), bubble fraction (pp-1)/(m+pp-1) on every rank, for any
 * F and B of a stage. */
static void check_fill_drain(enum wl_schedule kind)
{
  const double fb[][2] = {{1, 2}, {2, 1}, {1, 1}, {2, 3}};
  for (size_t i = 0; i < NELEM(plain_shapes); i++) {
    struct progs P;
    progs_build(&P, kind, plain_shapes[i].pp, 1, plain_shapes[i].mb);
    int pp = P.pp, m = P.mb;
    for (size_t j = 0; j < NELEM(fb); j++) {
      struct dur d = {.f = fb[j][0], .b = fb[j][1]};
      struct simres s = simulate(&P, &d);
      double want = (double)(pp - 1) / (m + pp - 1);
      cr_expect(fabs(s.makespan - (m + pp - 1) * (d.f + d.b)) < EPS, "%s pp=%d m=%d: step %g",
                wl_schedule_name(kind),
                pp, m, s.makespan);
      for (int r = 0; r < pp; r++) {
        double frac = (s.makespan - s.busy[r]) / s.makespan;
        cr_expect(fabs(frac - want) < EPS, "%s pp=%d m=%d F=%g B=%g rank %d: bubble fraction %g, want %g",
                  wl_schedule_name(kind), pp, m, d.f, d.b, r, frac, want);
      }
    }
    progs_free(&P);
  }
}

Test(schedule, gpipe_bubble_fraction)
{
  check_fill_drain(WL_SCHED_GPIPE);
}

Test(schedule, onef1b_bubble_fraction)
{
  check_fill_drain(WL_SCHED_1F1B);
}

/* Interleaved: bubble time (pp-1)(F+B)/vpp on every rank, F and B of a whole stage. */
Test(schedule, interleaved_bubble)
{
  const double fb[][2] = {{1, 2}, {2, 1}, {1, 1}, {2, 3}};
  for (size_t i = 0; i < NELEM(interleaved_shapes); i++) {
    struct progs P;
    const struct shape *sh = &interleaved_shapes[i];
    progs_build(&P, WL_SCHED_INTERLEAVED, sh->pp, sh->vpp, sh->mb);
    for (size_t j = 0; j < NELEM(fb); j++) {
      double F = fb[j][0] * sh->vpp, B = fb[j][1] * sh->vpp; /* per chunk: fb[j] */
      struct dur d = {.f = F / sh->vpp, .b = B / sh->vpp};
      struct simres s = simulate(&P, &d);
      double want = (sh->pp - 1) * (F + B) / sh->vpp;
      cr_expect(fabs(max_bubble(&P, &s) - want) < EPS && fabs(min_bubble(&P, &s) - want) < EPS,
                "interleaved pp=%d vpp=%d m=%d F=%g B=%g: bubble %g..%g, want %g", sh->pp, sh->vpp, sh->mb, F,
                B, min_bubble(&P, &s), max_bubble(&P, &s), want);
      cr_expect(fabs(s.makespan - (sh->mb * (F + B) + want)) < EPS);
    }
    progs_free(&P);
  }
}

/* ZB-H1: bubble (pp-1)(F+B-W), B = backward for inputs (zero-bubble paper's notation) on every
 * rank; in DeepSeek's notation (B = full backward) (pp-1)(F+B-2W). */
Test(schedule, zb_h1_bubble)
{
  const double fbw[][3] = {{1, 1, 1},   {2, 2, 1}, {3, 2, 1}, {2, 3, 1},
                           {2, 2, 0.5}, {4, 4, 3}, {3, 3, 3}, {2, 1, 1}};
  for (size_t i = 0; i < NELEM(plain_shapes); i++) {
    const struct shape *sh = &plain_shapes[i];
    if (sh->mb < sh->pp) continue; /* the closed form assumes a full steady state */
    struct progs P;
    progs_build(&P, WL_SCHED_ZB_H1, sh->pp, 1, sh->mb);
    for (size_t j = 0; j < NELEM(fbw); j++) {
      double F = fbw[j][0], B = fbw[j][1], W = fbw[j][2], Bfull = B + W;
      struct dur d = {.f = F, .b = Bfull, .bi = B, .w = W};
      struct simres s = simulate(&P, &d);
      double want = (sh->pp - 1) * (F + B - W);
      cr_expect(fabs(want - (sh->pp - 1) * (F + Bfull - 2 * W)) < EPS);
      cr_expect(fabs(max_bubble(&P, &s) - want) < EPS && fabs(min_bubble(&P, &s) - want) < EPS,
                "zb_h1 pp=%d m=%d F=%g B=%g W=%g: bubble %g..%g, want %g", sh->pp, sh->mb, F, B, W,
                min_bubble(&P, &s), max_bubble(&P, &s), want);
      /* and it is 1F1B's (pp-1)(F+B+W) less 2(pp-1)W... */
      cr_expect(fabs((sh->pp - 1) * (F + Bfull) - want - 2 * (sh->pp - 1) * W) < EPS);
    }
    progs_free(&P);
  }
}

/* ZB-H1 against 1F1B with the same durations: never slower, as the paper's Table 1 has it. */
Test(schedule, zb_h1_never_slower_than_1f1b)
{
  for (size_t i = 0; i < NELEM(plain_shapes); i++) {
    const struct shape *sh = &plain_shapes[i];
    struct progs Z, O;
    progs_build(&Z, WL_SCHED_ZB_H1, sh->pp, 1, sh->mb);
    progs_build(&O, WL_SCHED_1F1B, sh->pp, 1, sh->mb);
    struct dur d = {.f = 2, .b = 3, .bi = 2, .w = 1};
    double tz = simulate(&Z, &d).makespan, to = simulate(&O, &d).makespan;
    cr_expect_leq(tz, to + EPS, "pp=%d m=%d: zb_h1 %g, 1f1b %g", sh->pp, sh->mb, tz, to);
    progs_free(&Z);
    progs_free(&O);
  }
}

/* DualPipe: bubble (pp/2-1)(F&B+B-3W) with B the full backward, on the middle ranks (the most
 * idle, as DeepSeek-V3's Table 2 counts it); the others idle less. The figure npusim reports,
 * the busiest rank's, is that bubble at pp 4 and below it from pp 6, where the edge ranks
 * overlap fewer pairs. */
Test(schedule, dualpipe_bubble)
{
  const double fw[][2] = {{1, 1}, {1, 0.5}, {2, 1}, {2, 2}, {3, 1}, {3, 2}, {3, 3}};
  for (size_t i = 0; i < NELEM(dualpipe_shapes); i++) {
    const struct shape *sh = &dualpipe_shapes[i];
    struct progs P;
    progs_build(&P, WL_SCHED_DUALPIPE, sh->pp, 1, sh->mb);
    for (size_t j = 0; j < NELEM(fw); j++) {
      double F = fw[j][0], W = fw[j][1], BI = F, B = BI + W;
      const double pairs[] = {B, F + BI, (B + F + B) / 2, F + B}; /* B <= F&B <= F+B */
      for (size_t q = 0; q < NELEM(pairs); q++) {
        struct dur d = {.f = F, .b = B, .bi = BI, .w = W, .fb = pairs[q]};
        struct simres s = simulate(&P, &d);
        double want = (sh->pp / 2 - 1) * (d.fb + B - 3 * W);
        cr_expect(fabs(max_bubble(&P, &s) - want) < EPS,
                  "dualpipe pp=%d m=%d F=%g B=%g W=%g F&B=%g: bubble %g, want %g", sh->pp, sh->mb, F, B, W,
                  d.fb, max_bubble(&P, &s), want);
        double reported = min_bubble(&P, &s);
        if (sh->pp <= 4)
          cr_expect(fabs(reported - want) < EPS, "dualpipe pp=%d m=%d: reported %g, want %g", sh->pp, sh->mb, reported,
                    want);
        else
          cr_expect(reported > 0 && reported <= want + EPS, "dualpipe pp=%d m=%d: reported %g above the table's %g",
                    sh->pp, sh->mb, reported, want);
        int mid = sh->pp / 2;
        cr_expect(fabs(s.makespan - s.busy[mid] - want) < EPS &&
                      fabs(s.makespan - s.busy[mid - 1] - want) < EPS,
                  "dualpipe pp=%d m=%d: the middle ranks carry the bubble", sh->pp, sh->mb);
      }
    }
    progs_free(&P);
  }
}

/* With F&B = F + B (no overlap gain) every rank idles the same. */
Test(schedule, dualpipe_without_overlap_gain_is_uniform)
{
  struct progs P;
  progs_build(&P, WL_SCHED_DUALPIPE, 8, 1, 20);
  struct dur d = {.f = 1, .b = 2, .bi = 1, .w = 1, .fb = 3};
  struct simres s = simulate(&P, &d);
  cr_expect(fabs(max_bubble(&P, &s) - min_bubble(&P, &s)) < EPS);
  cr_expect(fabs(max_bubble(&P, &s) - 3 * (3 + 2 - 3)) < EPS);
  progs_free(&P);
}

/* ---- 3. activation memory ---------------------------------------------------------------- */

static int inflight(enum wl_schedule kind, int pp, int vpp, int mb, int stage)
{
  struct wl_slot *s;
  size_t n;
  struct npu_diag d = {0};
  cr_assert_eq(wl_schedule_build(kind, pp, vpp, mb, stage, &s, &n, &d), 0, "%s", d.msg);
  int v = wl_schedule_max_inflight(s, n, wl_schedule_chunks(kind, vpp));
  free(s);
  return v;
}

Test(schedule, inflight_gpipe_and_1f1b)
{
  for (int pp = 1; pp <= 8; pp++) {
    for (int mb = 1; mb <= 3 * pp; mb++) {
      for (int r = 0; r < pp; r++) {
        cr_expect_eq(inflight(WL_SCHED_GPIPE, pp, 1, mb, r), mb);
        int want = pp - r < mb ? pp - r : mb; /* stage 0: pp, last stage: 1 */
        cr_expect_eq(inflight(WL_SCHED_1F1B, pp, 1, mb, r), want, "1f1b pp=%d mb=%d rank %d", pp, mb, r);
      }
    }
  }
  cr_expect_eq(inflight(WL_SCHED_1F1B, 8, 1, 32, 0), 8);
  cr_expect_eq(inflight(WL_SCHED_1F1B, 8, 1, 32, 7), 1);
}

/* Interleaved: rank r holds (pp-r-1)*2 + (vpp-1)*pp + 1 chunk activations (Megatron's warmup
 * plus one); rank 0's pp*vpp + pp - 1 chunks are pp + (pp-1)/vpp stages, Korthikanti et al.
 * 2022's p(1 + (p-1)/(p v)). With m == pp everything is in flight. */
Test(schedule, inflight_interleaved)
{
  for (size_t i = 0; i < NELEM(interleaved_shapes); i++) {
    const struct shape *sh = &interleaved_shapes[i];
    for (int r = 0; r < sh->pp; r++) {
      int want = (sh->pp - r - 1) * 2 + (sh->vpp - 1) * sh->pp + 1;
      if (sh->mb == sh->pp || want > sh->mb * sh->vpp) want = sh->mb * sh->vpp;
      cr_expect_eq(inflight(WL_SCHED_INTERLEAVED, sh->pp, sh->vpp, sh->mb, r), want,
                   "interleaved pp=%d vpp=%d mb=%d rank %d", sh->pp, sh->vpp, sh->mb, r);
    }
  }
  cr_expect_eq(inflight(WL_SCHED_INTERLEAVED, 4, 2, 8, 0), 4 * 2 + 4 - 1);
}

/* ZB-H1: the same peak as 1F1B, pp (zero-bubble paper sec. 3.1; DeepSeek-V3 Table 2); counting
 * activations until the W, every rank reaches it. */
Test(schedule, inflight_zb_h1)
{
  for (int pp = 1; pp <= 8; pp++)
    for (int mb = pp; mb <= 3 * pp; mb += pp)
      for (int r = 0; r < pp; r++)
        cr_expect_eq(inflight(WL_SCHED_ZB_H1, pp, 1, mb, r), pp, "pp=%d mb=%d rank %d", pp, mb, r);
}

/* DualPipe: pp + 1 chunk activations on every rank (DeepSeek-V3 Table 2, "PP+1"; a DualPipe
 * chunk is one of the model's pp stages, the unit of 1F1B's "PP"). */
Test(schedule, inflight_dualpipe)
{
  for (size_t i = 0; i < NELEM(dualpipe_shapes); i++) {
    const struct shape *sh = &dualpipe_shapes[i];
    for (int r = 0; r < sh->pp; r++)
      cr_expect_eq(inflight(WL_SCHED_DUALPIPE, sh->pp, 1, sh->mb, r), sh->pp + 1, "pp=%d mb=%d rank %d", sh->pp,
                   sh->mb, r);
  }
}

Test(schedule, inflight_counts_until_the_weight_gradient)
{
  const struct wl_slot s[] = {
      {WL_PH_F, 0, 0, 0}, {WL_PH_F, 0, 1, 0}, {WL_PH_BI, 0, 0, 0}, {WL_PH_F, 0, 2, 0},
      {WL_PH_W, 0, 0, 0}, {WL_PH_B, 0, 1, 0}, {WL_PH_BI, 0, 2, 0}, {WL_PH_W, 0, 2, 0},
  };
  cr_expect_eq(wl_schedule_max_inflight(s, NELEM(s), 1), 3);
  cr_expect_eq(wl_schedule_max_inflight(s, 0, 1), 0);
}

/* ---- 4. bad shapes ----------------------------------------------------------------------- */

static void expect_bad(enum wl_schedule kind, int pp, int vpp, int mb, const char *key, const char *msg)
{
  struct wl_slot *s = (struct wl_slot *)&s;
  size_t n = 99;
  struct npu_diag d = {0};
  cr_assert_eq(wl_schedule_build(kind, pp, vpp, mb, 0, &s, &n, &d), NPU_EINVAL, "%s pp=%d vpp=%d mb=%d",
               wl_schedule_name(kind), pp, vpp, mb);
  cr_expect_null(s);
  cr_expect_eq(n, 0);
  cr_expect_str_eq(d.key, key);
  cr_expect_str_eq(d.msg, msg);
  char *txt = NULL;
  struct npu_diag d2 = {0};
  cr_expect_eq(wl_schedule_ascii(kind, pp, vpp, mb, &txt, &d2), NPU_EINVAL);
  cr_expect_null(txt);
  cr_expect_str_eq(d2.msg, msg);
}

Test(schedule, bad_shapes)
{
  expect_bad(WL_SCHED_1F1B, 0, 1, 4, "plan.pp", "pp 0 must be at least 1");
  expect_bad(WL_SCHED_1F1B, 2, 0, 4, "plan.vpp", "vpp 0 must be at least 1");
  expect_bad(WL_SCHED_GPIPE, 2, 1, 0, "plan.global_batch", "0 micro-batches per step: need at least 1");
  expect_bad(WL_SCHED_1F1B, 4, 2, 8, "plan.vpp",
             "vpp 2 must be 1 for the '1f1b' schedule (several chunks per rank need 'interleaved')");
  expect_bad(WL_SCHED_ZB_H1, 4, 3, 8, "plan.vpp",
             "vpp 3 must be 1 for the 'zb_h1' schedule (several chunks per rank need 'interleaved')");
  expect_bad(WL_SCHED_INTERLEAVED, 4, 1, 8, "plan.vpp",
             "vpp 1 must be at least 2 for the 'interleaved' schedule");
  expect_bad(WL_SCHED_INTERLEAVED, 4, 256, 8, "plan.vpp", "vpp 256 must be at most 255");
  expect_bad(WL_SCHED_INTERLEAVED, 1, 2, 8, "plan.pp",
             "pp 1 must be at least 2 for the 'interleaved' schedule");
  expect_bad(WL_SCHED_INTERLEAVED, 4, 2, 10, "plan.global_batch",
             "pp 4 must divide the 10 micro-batches per step for the 'interleaved' schedule");
  expect_bad(WL_SCHED_DUALPIPE, 3, 1, 12, "plan.pp", "pp 3 must be even for the 'dualpipe' schedule");
  expect_bad(WL_SCHED_DUALPIPE, 4, 1, 6, "plan.global_batch",
             "6 micro-batches per step: the 'dualpipe' schedule needs an even number, at least 2 x pp = 8");
  expect_bad(WL_SCHED_DUALPIPE, 4, 1, 9, "plan.global_batch",
             "9 micro-batches per step: the 'dualpipe' schedule needs an even number, at least 2 x pp = 8");
  expect_bad(WL_SCHED_DUALPIPE, 4, 2, 8, "plan.vpp",
             "vpp 2 must be 1 for the 'dualpipe' schedule (several chunks per rank need 'interleaved')");
}

Test(schedule, ascii_refuses_too_many_microbatches)
{
  char *txt = NULL;
  struct npu_diag d = {0};
  cr_expect_eq(wl_schedule_ascii(WL_SCHED_1F1B, 2, 1, 37, &txt, &d), NPU_EINVAL);
  cr_expect_str_eq(d.key, "plan.global_batch");
  cr_expect_str_eq(d.msg, "the timeline draws at most 36 micro-batches, got 37");
}

/* ---- 5. literal programs, chunk maps, timelines ------------------------------------------ */

Test(schedule, literal_programs)
{
  /* Megatron 1F1B: warmup pp - stage - 1 */
  expect_prog(WL_SCHED_1F1B, 4, 1, 8, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  expect_prog(WL_SCHED_1F1B, 4, 1, 8, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  expect_prog(WL_SCHED_1F1B, 4, 1, 2, 0, "F0 F1 B0 B1");
  expect_prog(WL_SCHED_GPIPE, 2, 1, 3, 1, "F0 F1 F2 B2 B1 B0");
  /* Megatron interleaved, pp 2, vpp 2, 4 micro-batches: warmup (2-0-1)*2 + 2 = 4 on rank 0 */
  expect_prog(WL_SCHED_INTERLEAVED, 2, 2, 4, 0,
              "F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3");
  expect_prog(WL_SCHED_INTERLEAVED, 2, 2, 4, 1,
              "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3");
  /* m == pp: all forwards first */
  expect_prog(WL_SCHED_INTERLEAVED, 2, 2, 2, 1, "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
  /* ZB-H1: rank r defers its first r weight gradients */
  expect_prog(WL_SCHED_ZB_H1, 4, 1, 6, 0, "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5");
  expect_prog(WL_SCHED_ZB_H1, 4, 1, 6, 3, "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5");
  /* DualPipe pp 4, 8 micro-batches (0-3 from rank 0, 4-7 from rank 3), step for step from
   * dualpipe.py; ranks 1 and 2 are the middle ranks (first main-step pair not overlapped) */
  expect_prog(WL_SCHED_DUALPIPE, 4, 1, 8, 0,
              "F0.0 F0.1 F0.2 F1.4 I1.4 W1.4 F1.5 F0.3+B1.5 F1.6+B0.0 B1.6 F1.7+B0.1 B1.7 I0.2 W0.2 I0.3 W0.3");
  expect_prog(WL_SCHED_DUALPIPE, 4, 1, 8, 1,
              "F0.0 F1.4 F0.1 F1.5 F0.2 B1.4 F1.6+B0.0 F0.3+B1.5 F1.7+B0.1 B1.6 B0.2 I1.7 I0.3 W1.7 W0.3");
  expect_prog(WL_SCHED_DUALPIPE, 4, 1, 8, 2,
              "F1.4 F0.0 F1.5 F0.1 F1.6 B0.0 F0.2+B1.4 F1.7+B0.1 F0.3+B1.5 B0.2 B1.6 I0.3 I1.7 W0.3 W1.7");
  expect_prog(WL_SCHED_DUALPIPE, 4, 1, 8, 3,
              "F1.4 F1.5 F1.6 F0.0 I0.0 W0.0 F0.1 F1.7+B0.1 F0.2+B1.4 B0.2 F0.3+B1.5 B0.3 I1.6 W1.6 I1.7 W1.7");
}

/* Combined 1F1B (plan.ep_overlap): one more warm-up forward, then each steady-state forward
 * paired with the backward of an earlier micro-batch ('+'), never its own. */
static void expect_paired(enum wl_schedule kind, int pp, int vpp, int mb, int stage, const char *want)
{
  check_prog(kind, pp, vpp, mb, stage, true, want);
}

Test(schedule, combined_1f1b_pairs_the_steady_state)
{
  /* Megatron-Core's moe_a2a_overlap guide, pp 1: F0 | F1+B0 | ... | B(N-1) */
  expect_paired(WL_SCHED_1F1B, 1, 1, 4, 0, "F0 F1+B0 F2+B1 F3+B2 B3");
  /* pp 2, vpp 2 (interleaved): the warm-up of 4 (rank 0) and 2 (rank 1) chunks gains one */
  expect_paired(WL_SCHED_INTERLEAVED, 2, 2, 4, 0,
                "F0.0 F0.1 F1.0 F1.1 F0.2 F0.3+B1.0 F1.2+B1.1 F1.3+B0.0 B0.1 B1.2 B1.3 B0.2 B0.3");
  expect_paired(WL_SCHED_INTERLEAVED, 2, 2, 4, 1,
                "F0.0 F0.1 F1.0 F1.1+B1.0 F0.2+B1.1 F0.3+B0.0 F1.2+B0.1 F1.3+B1.2 B1.3 B0.2 B0.3");
  /* one micro-batch: nothing to pair */
  expect_paired(WL_SCHED_1F1B, 1, 1, 1, 0, "F0 B0");
}

Test(schedule, chunk_maps)
{
  cr_expect_eq(wl_schedule_chunks(WL_SCHED_1F1B, 1), 1);
  cr_expect_eq(wl_schedule_chunks(WL_SCHED_INTERLEAVED, 3), 3);
  cr_expect_eq(wl_schedule_chunks(WL_SCHED_DUALPIPE, 1), 2);
  cr_expect_eq(wl_schedule_model_chunk(WL_SCHED_1F1B, 4, 1, 2, 0), 2);
  cr_expect_eq(wl_schedule_model_chunk(WL_SCHED_INTERLEAVED, 4, 3, 1, 2), 9);
  cr_expect_eq(wl_schedule_model_chunk(WL_SCHED_DUALPIPE, 8, 1, 1, 0), 1);
  cr_expect_eq(wl_schedule_model_chunk(WL_SCHED_DUALPIPE, 8, 1, 1, 1), 6);
  int st, ch;
  wl_schedule_locate(WL_SCHED_DUALPIPE, 8, 1, 16, 3, 2, &st, &ch);
  cr_expect(st == 2 && ch == 0);
  wl_schedule_locate(WL_SCHED_DUALPIPE, 8, 1, 16, 8, 2, &st, &ch);
  cr_expect(st == 5 && ch == 1);
  wl_schedule_locate(WL_SCHED_INTERLEAVED, 4, 2, 8, 5, 6, &st, &ch);
  cr_expect(st == 2 && ch == 1);
}

/* The timeline's row length is the simulated makespan with the documented units. */
Test(schedule, ascii_timeline_matches_the_simulator)
{
  const struct {
    enum wl_schedule kind;
    int pp, vpp, mb;
  } cases[] = {
      {WL_SCHED_GPIPE, 4, 1, 8},       {WL_SCHED_1F1B, 4, 1, 8},      {WL_SCHED_INTERLEAVED, 4, 2, 8},
      {WL_SCHED_ZB_H1, 4, 1, 8},       {WL_SCHED_DUALPIPE, 4, 1, 10}, {WL_SCHED_DUALPIPE, 8, 1, 20},
      {WL_SCHED_INTERLEAVED, 2, 3, 4},
  };
  for (size_t i = 0; i < NELEM(cases); i++) {
    struct progs P;
    progs_build(&P, cases[i].kind, cases[i].pp, cases[i].vpp, cases[i].mb);
    struct dur d = {.f = 1, .b = 2, .bi = 1, .w = 1, .fb = 2};
    struct simres s = simulate(&P, &d);
    char *txt = NULL;
    struct npu_diag diag = {0};
    cr_assert_eq(wl_schedule_ascii(P.kind, P.pp, P.vpp, P.mb, &txt, &diag), 0, "%s", diag.msg);
    size_t width = P.chunks > 1 ? 3 : 2, longest = 0, lines = 0;
    for (const char *l = txt; *l; lines++) {
      const char *e = strchr(l, '\n');
      cr_assert_not_null(e);
      if ((size_t)(e - l) > longest) longest = (size_t)(e - l);
      l = e + 1;
    }
    cr_expect_eq(lines, (size_t)P.pp);
    cr_expect_eq(longest, 8 + (size_t)s.makespan * width, "%s: %zu columns for makespan %g",
                 wl_schedule_name(P.kind), longest, s.makespan);
    free(txt);
    progs_free(&P);
  }
}

/* docs/SCHEDULES.md shows the pp = 4 timelines exactly as wl_schedule_ascii draws them. */
Test(schedule, docs_show_the_timelines)
{
  char path[1024];
  snprintf(path, sizeof path, "%s/docs/SCHEDULES.md", NPUSIM_SOURCE_DIR);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  static char doc[1 << 17];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = '\0';
  const struct {
    enum wl_schedule kind;
    int pp, vpp, mb;
  } cases[] = {
      {WL_SCHED_GPIPE, 4, 1, 8},       {WL_SCHED_1F1B, 4, 1, 8},      {WL_SCHED_INTERLEAVED, 4, 2, 8},
      {WL_SCHED_ZB_H1, 4, 1, 8},       {WL_SCHED_DUALPIPE, 4, 1, 10},
  };
  for (size_t i = 0; i < NELEM(cases); i++) {
    char *txt = NULL;
    struct npu_diag d = {0};
    cr_assert_eq(wl_schedule_ascii(cases[i].kind, cases[i].pp, cases[i].vpp, cases[i].mb, &txt, &d), 0);
    cr_expect_not_null(strstr(doc, txt), "docs/SCHEDULES.md lacks the %s timeline (pp=%d vpp=%d mb=%d):\n%s",
                       wl_schedule_name(cases[i].kind), cases[i].pp, cases[i].vpp, cases[i].mb, txt);
    free(txt);
  }
}
