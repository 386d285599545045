/*
 * analytic.c - the analytic fidelity: a closed-form pipelined tile model built from the same
 * tile program.
 *
 * For each block class the kernel declares (all blocks one class by default), the pipe
 * executor runs one unit on one block (T1) and on 1 + K consecutive blocks (T1+K, K = 4) of that
 * class. D = (T1+K - T1) / K is the class's steady-state time per block: the overlap that double
 * (or up to quadruple) buffering buys, including dependency cycles that span several blocks (a
 * buffer comes back every `buffers` blocks). A unit's time is T1 of its first block plus D for
 * each further block; the kernel's is the launch overhead plus the slowest unit, floored at the
 * memory roofline (a kernel the floor sets is labelled by its GM pipes:
 * core__result_memory_bound). Statistics compose the same way.
 *
 * The sampled unit runs on a memory system of its own (below): in step with the other units, it
 * has 1/U of L2 and HBM; drifting among them, what they leave. Its copies in flight share the
 * links max-min fairly, as the event fidelity shares the chip's. The share of each GM tensor's
 * reads served by L2 comes from replaying the GM copies of the first two waves through a tile
 * cache (trace_hits).
 *
 * What it gives up against the event fidelity: units that drift out of step (a partial last
 * wave has fewer cores sharing HBM), the order in which cores touch L2, and any interaction
 * between blocks beyond the next one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "memory/dma.h"
#include "memory/gm.h"
#include "memory/platform.h"

/*
 * Indexed copies in the L2 estimate. The trace (trace_hits) only emits the program, it does not
 * run it, so it never sees an index. A functional run has them: its functional pass records,
 * per core and pipe in execution order (which is the pipe's emission order), the GM address each
 * indexed copy really touched, and the trace takes them back in the same order. A timing-only
 * run has no index: the trace gives each indexed copy a key of its own that no tensor has (a
 * tile nobody touched before and nobody touches again: a miss, and no reuse), as the event
 * fidelity's L2 does (core__gm_tile).
 */
struct ixlist {
  uint64_t *addr; /* UINT64_MAX: unknown */
  size_t n, cap, next;
};

struct core__ixlog {
  struct ixlist *l; /* [core * CORE_PIPE_COUNT + pipe] */
  int ncores;
};

static struct core__ixlog *ixlog_create(int ncores)
{
  struct core__ixlog *x = npu_xcalloc(1, sizeof *x);
  x->ncores = ncores;
  x->l = npu_xcalloc((size_t)ncores * CORE_PIPE_COUNT, sizeof *x->l);
  return x;
}

static void ixlog_destroy(struct core__ixlog *x)
{
  if (!x) return;
  for (int i = 0; i < x->ncores * CORE_PIPE_COUNT; i++) free(x->l[i].addr);
  free(x->l);
  free(x);
}

static void ixlog_add(struct core__ixlog *x, int core, int pipe, uint64_t addr)
{
  struct ixlist *l = &x->l[core * CORE_PIPE_COUNT + pipe];
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->addr = npu_xrealloc(l->addr, l->cap * sizeof *l->addr);
  }
  l->addr[l->n++] = addr;
}

/* The next recorded address of (core, pipe), UINT64_MAX if none or unknown. */
static uint64_t ixlog_next(struct core__ixlog *x, int core, int pipe)
{
  if (!x || core < 0 || core >= x->ncores) return UINT64_MAX;
  struct ixlist *l = &x->l[core * CORE_PIPE_COUNT + pipe];
  return l->next < l->n ? l->addr[l->next++] : UINT64_MAX;
}

/*
 * The functional pass's backend: a copy resolves at once at the core's own rate. Its timing is
 * not used (the samples below time the kernel); it only has to run every block's effects in
 * dataflow order and record where indexed copies went.
 */
static bool at_once_start(struct core__run *r, struct core__core *c, int pipe, double t)
{
  struct core__pipe *p = &c->pipe[pipe];
  const struct core_instr *in = &p->q[p->head];
  if (r->ixlog && in->u.copy.indexed) {
    struct core_tile g;
    ixlog_add(r->ixlog, c->id, pipe, core__gm_tile(r, c, &in->u.copy, &g) ? g.addr : UINT64_MAX);
  }
  bool read = in->u.copy.src.space == MEM_GM;
  double own = read ? mem_platform_core_read_bytes_per_s(r->chip, c->id) : mem_platform_core_write_bytes_per_s(r->chip);
  core__gm_finish(r, c, pipe, t + (double)core__gm_bytes(r->chip, in) / own, 0);
  return true;
}

static const struct core__gm_backend at_once_backend = {"analytic (functional pass)", at_once_start};

/*
 * The sampled unit. The units of a launch that run the same sequence of block classes start
 * together and stay in step, so they make their GM copies at the same moments (the event
 * fidelity shows it: a GEMM's FixPipe writes of every core overlap, and so do their next loads).
 * Such a unit is simulated on a memory system of its own, as the event fidelity simulates the
 * chip: the unit's cores keep their own links (read side, write port, write engines:
 * memory/platform.h) and get 1/U of L2 and HBM (U: the units with work). A copy becomes the event
 * fidelity's flows -- its L2 hits (L2 and the port), its misses (HBM, L2 and the port), a
 * multicast read's share from the cluster's network (the port) -- at its tensor's hit shares
 * (trace_hits), and the flows in flight share the links they cross max-min fairly, as CM02 shares
 * the platform's links.
 *
 * Units whose class sequences differ (causal attention's blocks of unequal work, dealt heaviest
 * first) drift out of step: when one copies, the others move their bytes at their mean rate.
 * Such a unit gets what the other U - 1 units leave of L2 and of HBM at the mean rate the
 * samples measure (iterated to a fixed point), and never less than its fair 1/U.
 *
 * What it gives up against the event fidelity: a partial last wave (fewer units share L2 and
 * HBM), L2 hits per tensor rather than per copy, the moments at which drifting units really
 * copy.
 */
enum { LINK_HBM, LINK_L2, LINK_CORE0 };
enum { LINK_RD, LINK_WR, LINK_MTE3, LINK_FIX, LINKS_PER_CORE };

struct fflow {
  int core, pipe;
  int link[4], nlink;
  double left, rate;
  bool frozen;
};

struct fluid {
  double *cap, *rem; /* per link: capacity; left to share while rates are set */
  int *count;        /* per link: flows not yet frozen */
  struct fflow *f;
  int n, size;
};

static int link_of(int core, int which)
{
  return LINK_CORE0 + core * LINKS_PER_CORE + which;
}

/* shared: the unit's bandwidth of HBM and of L2 (bytes/s). */
static void fluid_init(struct fluid *s, const struct arch_chip *chip, const double *shared)
{
  int ncores = mem_platform_cores(chip), nlinks = link_of(ncores, 0);
  s->cap = npu_xcalloc((size_t)nlinks, sizeof *s->cap);
  s->rem = npu_xcalloc((size_t)nlinks, sizeof *s->rem);
  s->count = npu_xcalloc((size_t)nlinks, sizeof *s->count);
  s->cap[LINK_HBM] = shared[0];
  s->cap[LINK_L2] = shared[1];
  for (int i = 0; i < ncores; i++) {
    s->cap[link_of(i, LINK_RD)] = mem_platform_core_read_bytes_per_s(chip, i);
    s->cap[link_of(i, LINK_WR)] = mem_platform_core_write_bytes_per_s(chip);
    if (mem_platform_core_has(chip, i, ARCH_PATH_UB_TO_GM))
      s->cap[link_of(i, LINK_MTE3)] = mem_platform_engine_bytes_per_s(chip, ARCH_PATH_UB_TO_GM);
    if (mem_platform_core_has(chip, i, ARCH_PATH_L0C_TO_GM))
      s->cap[link_of(i, LINK_FIX)] = mem_platform_engine_bytes_per_s(chip, ARCH_PATH_L0C_TO_GM);
  }
  s->f = NULL;
  s->n = s->size = 0;
}

static void fluid_release(struct fluid *s)
{
  free(s->cap);
  free(s->rem);
  free(s->count);
  free(s->f);
}

static void add_flow(struct fluid *s, int core, int pipe, uint64_t bytes, const int *links, int nlink)
{
  if (!bytes) return;
  if (s->n == s->size) {
    s->size = s->size ? 2 * s->size : 16;
    s->f = npu_xrealloc(s->f, (size_t)s->size * sizeof *s->f);
  }
  struct fflow *f = &s->f[s->n++];
  *f = (struct fflow){.core = core, .pipe = pipe, .nlink = nlink, .left = (double)bytes};
  for (int i = 0; i < nlink; i++) f->link[i] = links[i];
}

/* A GM copy waits for its start time, as in the event fidelity. */
static bool fluid_start(struct core__run *r, struct core__core *c, int pipe, double t)
{
  c->pipe[pipe].st = P_ISSUE;
  core__heap_push(r, t, c->id, pipe);
  return false;
}

static const struct core__gm_backend fluid_backend = {"analytic", fluid_start};

/* The route of a copy's L2 hits (a read to the core's read side; a write from its engine through
 * its write port), and with miss, of its misses (HBM as well). */
static int route_of(int core, bool read, const struct core_instr *in, bool miss, int *links)
{
  int n = 0;
  if (miss && read) links[n++] = LINK_HBM;
  if (read) {
    links[n++] = LINK_L2;
    links[n++] = link_of(core, LINK_RD);
    return n;
  }
  links[n++] = link_of(core, in->u.copy.src.space == MEM_UB ? LINK_MTE3 : LINK_FIX);
  links[n++] = link_of(core, LINK_WR);
  links[n++] = LINK_L2;
  if (miss) links[n++] = LINK_HBM;
  return n;
}

/* The share of a copy's bytes that L2 serves (read) or absorbs (write): its tensor's (a streamed
 * weight misses while the tile every block reuses hits), the kernel's where the tensor is unknown. */
static double hit_share(const struct core__run *r, const struct core__core *c, const struct core_copy *cp, bool read)
{
  struct core_tile g;
  long t = r->tensor_hits && core__gm_tile(r, c, cp, &g) ? mem_gm_index(r->gm, g.addr) : -1;
  if (t >= 0) return r->tensor_hits[2 * t + !read];
  return read ? r->hit_fraction : r->hit_fraction_wr;
}

/* A GM copy whose start time (now) has come: its flows, and the kernel's byte counts. */
static void fluid_issue(struct core__run *r, struct fluid *s, int core, int pipe, double now)
{
  struct core__core *c = &r->cores[core];
  struct core__pipe *p = &c->pipe[pipe];
  const struct core_instr *in = &p->q[p->head];
  bool read = in->u.copy.src.space == MEM_GM;
  uint64_t bytes = core__gm_bytes(r->chip, in);
  double h = hit_share(r, c, &in->u.copy, read);
  uint64_t hit = (uint64_t)llround((double)bytes * h);
  uint64_t l2_hit = core__multicast_share(in, hit), peer = hit - l2_hit, miss = bytes - hit;
  if (read) r->res.gm_read_bytes += bytes - peer; else r->res.gm_write_bytes += bytes;
  r->res.l2_hit_bytes += l2_hit;
  r->res.hbm_bytes += miss;
  int before = s->n, links[4], n = route_of(core, read, in, false, links);
  add_flow(s, core, pipe, l2_hit, links, n);
  n = route_of(core, read, in, true, links);
  add_flow(s, core, pipe, miss, links, n);
  if (read) add_flow(s, core, pipe, peer, (const int[]){link_of(core, LINK_RD)}, 1);
  p->miss_share = bytes ? 1.0 - h : 0.0;
  p->st = P_INFLIGHT;
  p->parts = s->n - before;
  if (!p->parts) core__gm_finish(r, c, pipe, now, 0); /* nothing to move */
}

/* Max-min fair rates of the flows in flight (progressive filling): the link with the smallest
 * fair share fixes the rate of every unfrozen flow through it, which then leave the others. */
static void fluid_rates(struct fluid *s)
{
  for (int i = 0; i < s->n; i++) {
    struct fflow *f = &s->f[i];
    f->frozen = false;
    for (int j = 0; j < f->nlink; j++) {
      s->rem[f->link[j]] = s->cap[f->link[j]];
      s->count[f->link[j]] = 0;
    }
  }
  for (int i = 0; i < s->n; i++)
    for (int j = 0; j < s->f[i].nlink; j++) s->count[s->f[i].link[j]]++;
  for (int left = s->n; left > 0;) {
    int best = -1;
    double share = INFINITY;
    for (int i = 0; i < s->n; i++) {
      const struct fflow *f = &s->f[i];
      if (f->frozen) continue;
      for (int j = 0; j < f->nlink; j++) {
        int l = f->link[j];
        double x = s->rem[l] / s->count[l];
        if (x < share) share = x, best = l;
      }
    }
    for (int i = 0; i < s->n; i++) {
      struct fflow *f = &s->f[i];
      bool through = false;
      for (int j = 0; j < f->nlink && !f->frozen; j++) through |= f->link[j] == best;
      if (!through) continue;
      f->frozen = true;
      f->rate = share;
      left--;
      for (int j = 0; j < f->nlink; j++) {
        s->rem[f->link[j]] -= share;
        s->count[f->link[j]]--;
      }
    }
  }
}

/* Run the unit to its end: the event fidelity's driver (event.c) on the fluid memory system. */
static void fluid_run(struct core__run *r, struct fluid *s)
{
  double now = r->t0;
  for (;;) {
    core__drain(r);
    if (r->err) break;
    while (r->nheap && r->heap[0].t <= now) {
      struct core__heap_item it = core__heap_pop(r);
      fluid_issue(r, s, it.core, it.pipe, now);
    }
    if (s->n == 0 && r->nheap == 0) {
      if (core__all_done(r)) break;
      if (core__deadlock(r)) break;
      continue;
    }
    if (s->n == 0) {
      now = r->heap[0].t;
      continue;
    }
    fluid_rates(s);
    double dt = INFINITY;
    for (int i = 0; i < s->n; i++) dt = fmin(dt, s->f[i].left / s->f[i].rate);
    bool start = r->nheap && r->heap[0].t - now < dt;
    if (start) dt = r->heap[0].t - now;
    now = start ? r->heap[0].t : now + dt;
    /* flows that end now (within rounding) complete; their copy when its last flow does */
    for (int i = s->n - 1; i >= 0; i--) {
      struct fflow *f = &s->f[i];
      if (f->left > f->rate * dt * (1 + 1e-9)) {
        f->left -= f->rate * dt;
        continue;
      }
      struct core__core *c = &r->cores[f->core];
      struct core__pipe *p = &c->pipe[f->pipe];
      int pipe = f->pipe;
      s->f[i] = s->f[--s->n];
      if (--p->parts > 0) continue;
      /* read data lands after the expected latency: L2's, and HBM's for the share that misses */
      core__gm_finish(r, c, pipe, now, p->miss_share);
    }
  }
}

#define SAMPLE_K 4
/* Passes of the drifting units' fixed point at most (units in step take one; causal
 * FlashAttention on 910B2, A100 and H100 takes 3 to 8). */
#define MAX_PASSES 8

/* A kernel that runs a fixed list of blocks on one unit. */
struct sample {
  const struct core_kernel *k;
  uint64_t blocks[SAMPLE_K + 1];
  int n;
};

static uint64_t sample_block_of(void *ctx, int unit, uint64_t i)
{
  const struct sample *s = ctx;
  (void)unit;
  return i < (uint64_t)s->n ? s->blocks[i] : UINT64_MAX;
}

static void sample_begin(struct core_tp *t, void *ctx)
{
  const struct sample *s = ctx;
  if (s->k->unit_begin) s->k->unit_begin(t, s->k->ctx);
}

static void sample_end(struct core_tp *t, void *ctx)
{
  const struct sample *s = ctx;
  if (s->k->unit_end) s->k->unit_end(t, s->k->ctx);
}

static void sample_block(struct core_tp *t, void *ctx, uint64_t b)
{
  const struct sample *s = ctx;
  s->k->block(t, s->k->ctx, b);
}

/* Run one unit over the listed blocks as the sampled unit, with `shared` of HBM and L2 (bytes/s);
 * fills res and time. */
static int run_sample(const struct arch_chip *chip, struct mem_gm *gm, const struct core_kernel *k,
                      const uint64_t *blocks, int n, const double *hit, const double *tensor_hits, const double *shared,
                      struct core_result *res, double *time, struct npu_diag *diag)
{
  struct sample s = {.k = k, .n = n};
  for (int i = 0; i < n; i++) s.blocks[i] = blocks[i];
  struct core_kernel sk = *k;
  sk.block_dim = 1;
  sk.nblocks = UINT64_MAX - 1;
  sk.ctx = &s;
  sk.unit_begin = sample_begin;
  sk.unit_end = sample_end;
  sk.block = sample_block;
  sk.block_of = sample_block_of;
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
  struct core__run r;
  core__run_init(&r, chip, gm, &sk, &o);
  r.be = &fluid_backend;
  r.hit_fraction = hit[0];
  r.hit_fraction_wr = hit[1];
  r.tensor_hits = tensor_hits;
  struct fluid fl;
  fluid_init(&fl, chip, shared);
  for (int u = 0; u < r.nunits; u++) core__generate(&r, &r.units[u]);
  fluid_run(&r, &fl);
  fluid_release(&fl);
  int rc = r.err;
  if (rc) {
    *diag = r.diag;
  } else {
    core__finish_result(&r);
    *res = r.res;
    *time = r.end - r.t0;
  }
  core__run_release(&r);
  return rc;
}

/* dst += f * src over every additive field. */
static void res_axpy(struct core_result *dst, const struct core_result *src, double f)
{
  for (int p = 0; p < CORE_PIPE_COUNT; p++) {
    dst->aic[p].busy_s += f * src->aic[p].busy_s;
    dst->aiv[p].busy_s += f * src->aiv[p].busy_s;
    dst->aic[p].gm_busy_s += f * src->aic[p].gm_busy_s;
    dst->aiv[p].gm_busy_s += f * src->aiv[p].gm_busy_s;
    dst->aic[p].instructions += (uint64_t)llround(f * (double)src->aic[p].instructions);
    dst->aiv[p].instructions += (uint64_t)llround(f * (double)src->aiv[p].instructions);
  }
  for (int p = 0; p < ARCH_PATH_COUNT; p++) dst->path_bytes[p] += (uint64_t)llround(f * (double)src->path_bytes[p]);
  dst->gm_read_bytes += (uint64_t)llround(f * (double)src->gm_read_bytes);
  dst->gm_write_bytes += (uint64_t)llround(f * (double)src->gm_write_bytes);
  dst->l2_hit_bytes += (uint64_t)llround(f * (double)src->l2_hit_bytes);
  dst->hbm_bytes += (uint64_t)llround(f * (double)src->hbm_bytes);
  dst->flops += f * src->flops;
  dst->cube_macs += (uint64_t)llround(f * (double)src->cube_macs);
  dst->bank_conflict_cycles += (uint64_t)llround(f * (double)src->bank_conflict_cycles);
  dst->instructions += (uint64_t)llround(f * (double)src->instructions);
}

/* res = a - b for the additive fields (the second block of a pair). */
static struct core_result res_diff(const struct core_result *a, const struct core_result *b)
{
  struct core_result d = {0};
  res_axpy(&d, a, 1);
  for (int p = 0; p < CORE_PIPE_COUNT; p++) {
    d.aic[p].busy_s -= b->aic[p].busy_s;
    d.aiv[p].busy_s -= b->aiv[p].busy_s;
    d.aic[p].gm_busy_s -= b->aic[p].gm_busy_s;
    d.aiv[p].gm_busy_s -= b->aiv[p].gm_busy_s;
    d.aic[p].instructions -= b->aic[p].instructions;
    d.aiv[p].instructions -= b->aiv[p].instructions;
  }
  for (int p = 0; p < ARCH_PATH_COUNT; p++) d.path_bytes[p] -= b->path_bytes[p];
  d.gm_read_bytes -= b->gm_read_bytes;
  d.gm_write_bytes -= b->gm_write_bytes;
  d.l2_hit_bytes -= b->l2_hit_bytes;
  d.hbm_bytes -= b->hbm_bytes;
  d.flops -= b->flops;
  d.cube_macs -= b->cube_macs;
  d.bank_conflict_cycles -= b->bank_conflict_cycles;
  d.instructions -= b->instructions;
  return d;
}

struct klass {
  uint64_t rep[SAMPLE_K + 1]; /* first blocks of the class */
  int nrep;
  struct core_result r1, r2, delta;
  double t1, t2;
};

#define MAX_CLASSES 256

/*
 * Share of GM reads served by L2, from the kernel's own access order: the GM copies of the first
 * two blocks of every unit are replayed through a cache of whole tiles (FIFO with refresh, the
 * L2's capacity), the units interleaved one copy at a time as cores running at the same speed
 * would be. Tiles are keyed by address and shape: kernels reload the same tiles (GEMM reloads A
 * and B tiles, attention K and V blocks), which is where L2 hits come from. The first wave's
 * share is weighted once, the second's for every further wave. Reuse further apart than two
 * waves is estimated per tensor (see below); the larger of the two estimates is used.
 *
 * Copies a unit makes once -- in unit_begin (RMSNorm's gamma, resident for the whole unit) or
 * unit_end, or in a block of a class that no unit runs twice (a phase of the kernel, as
 * moe_permute's histogram store before its all-core barrier) -- are counted once per unit in both
 * estimates, never extrapolated over the waves: a load made once per unit is not a load made
 * every block (it made every later wave look like it re-read gamma from L2, and the histogram
 * workspace look rewritten in L2 by every block). unit_end's copies are traced after the two
 * waves; a once-per-unit class the two waves saw only part of counts its traced copies x (its
 * blocks / its traced blocks).
 *
 * Writes follow the event fidelity's L2 (memory/l2.h): a write to a tile that is resident and
 * already dirty is absorbed; any other write costs its HBM write (a tile read and then written in
 * place, as AdamW's p, m and v, reaches HBM both ways).
 */
struct tile_key {
  uint64_t addr;
  uint32_t rows, cols, ld;
  uint8_t dtype;
};

struct access {
  struct tile_key key;
  uint64_t bytes;
  bool read;
  int cls;  /* block class of the copy's block; -1: unit_begin / unit_end (once per unit) */
  int wave;
};

struct trace_ctx {
  struct access **list; /* per unit */
  size_t *n, *cap;
  int wave;
  bool once;                    /* emitting unit_begin / unit_end */
  int cls;                      /* class of the block being emitted */
  uint64_t *traced;             /* blocks traced per class */
  const struct core__run *run;  /* the emitting run: the sub-core a copy goes to */
  struct core__ixlog *ixlog;    /* functional runs: the real addresses of indexed copies */
  uint64_t fresh;               /* keys handed to indexed copies of unknown address */
};

/* The address an indexed copy touched (functional runs), or a key of its own that no tensor has:
 * from the top of the address space down, far above every tensor (mem_gm_index gives -1). */
static uint64_t indexed_key(struct trace_ctx *x, int unit, const struct core_copy *cp, bool read)
{
  int sel = x->run->tps[unit].sel;
  int core = sel >= 0 && sel < 3 ? x->run->units[unit].phys[sel] : -1;
  int pipe = read ? CORE_PIPE_MTE2 : cp->src.space == MEM_UB ? CORE_PIPE_MTE3 : CORE_PIPE_FIX;
  uint64_t addr = ixlog_next(x->ixlog, core, pipe);
  return addr != UINT64_MAX ? addr : UINT64_MAX - x->fresh++;
}

static void sink(void *ctx, int unit, const struct core_copy *cp)
{
  struct trace_ctx *x = ctx;
  bool read = cp->src.space == MEM_GM;
  const struct core_tile *g = read ? &cp->src : &cp->dst;
  if (x->n[unit] == x->cap[unit]) {
    x->cap[unit] = x->cap[unit] ? 2 * x->cap[unit] : 64;
    x->list[unit] = npu_xrealloc(x->list[unit], x->cap[unit] * sizeof **x->list);
  }
  struct access *a = &x->list[unit][x->n[unit]++];
  uint64_t bytes = ((uint64_t)g->rows * g->cols * (uint64_t)npu_dtype_bits((enum npu_dtype)g->dtype) + 7) / 8;
  uint64_t addr = cp->indexed ? indexed_key(x, unit, cp, read) : g->addr;
  *a = (struct access){{addr, g->rows, g->cols, core_tile_ld(g), g->dtype}, bytes, read, x->once ? -1 : x->cls, x->wave};
}

/* The kernel as the trace runs it: the same callbacks, with unit_begin's copies marked once. */
struct trace_kernel {
  const struct core_kernel *k;
  struct trace_ctx *x;
};

static void trace_begin(struct core_tp *t, void *ctx)
{
  struct trace_kernel *w = ctx;
  w->x->once = true;
  w->k->unit_begin(t, w->k->ctx);
  w->x->once = false;
}

static void trace_block(struct core_tp *t, void *ctx, uint64_t b)
{
  struct trace_kernel *w = ctx;
  int c = w->k->block_class ? w->k->block_class(w->k->ctx, b) : 0;
  w->x->cls = c;
  w->x->traced[c]++;
  w->k->block(t, w->k->ctx, b);
}

static uint64_t trace_block_of(void *ctx, int unit, uint64_t i)
{
  struct trace_kernel *w = ctx;
  return w->k->block_of(w->k->ctx, unit, i);
}

struct tile_cache {
  struct tile_key *keys;
  uint64_t *stamp; /* bytes inserted when the tile last entered */
  bool *dirty;     /* written since it entered */
  uint64_t mask, inserted, cap;
};

static uint64_t key_hash(const struct tile_key *k)
{
  uint64_t h = k->addr * 0x9E3779B97F4A7C15ull ^ ((uint64_t)k->rows << 32 | k->cols) * 0xff51afd7ed558ccdull;
  return h ^ (h >> 29) ^ k->ld ^ ((uint64_t)k->dtype << 56);
}

static bool key_eq(const struct tile_key *a, const struct tile_key *b)
{
  return a->addr == b->addr && a->rows == b->rows && a->cols == b->cols && a->ld == b->ld && a->dtype == b->dtype;
}

/* Touch a tile; returns whether L2 served it: a read, if the tile was resident; a write, if it was
 * resident and dirty (else the write costs HBM and makes it dirty; memory/l2.h). */
static bool cache_touch(struct tile_cache *c, const struct tile_key *k, uint64_t bytes, bool write)
{
  uint64_t i = key_hash(k) & c->mask;
  while (c->stamp[i] && !key_eq(&c->keys[i], k)) i = (i + 1) & c->mask;
  if (c->stamp[i]) {
    uint64_t age = c->inserted - c->stamp[i];
    if (age + bytes <= c->cap) {
      bool hit = !write || c->dirty[i];
      if (write) c->dirty[i] = true;
      if (2 * age > c->cap) c->stamp[i] = (c->inserted += bytes); /* refresh */
      return hit;
    }
  }
  c->keys[i] = *k;
  c->stamp[i] = (c->inserted += bytes);
  c->dirty[i] = write;
  return false;
}

/* Long-range reuse the two traced waves cannot see: over the whole kernel each tensor is
 * accessed (its share of the traced per-block accesses) x (all per-block accesses), plus its
 * once-per-unit accesses as traced; a tensor that fits in L2 misses only its own size, one larger
 * misses in proportion to how much of it does not fit. For writes the same count holds under the
 * dirty-line rule: a tensor's first write of each line costs HBM, later ones are absorbed while
 * the line stays. */
static double tensor_fit_hits(const struct arch_chip *chip, struct mem_gm *gm, const double *per_tensor,
                              const double *once, size_t nt, double all, double traced, double all_once)
{
  double hits = 0;
  for (size_t t = 0; t < nt; t++) {
    double n = (traced > 0 ? all * per_tensor[t] / traced : 0) + once[t], tsize = (double)mem_gm_bytes(gm, t);
    if (n <= tsize) continue;
    double fit = tsize > (double)chip->l2.size_bytes ? (double)chip->l2.size_bytes / tsize : 1;
    hits += (n - tsize) * fit;
  }
  return all + all_once > 0 ? hits / (all + all_once) : 0;
}

/* A share of hits over the whole kernel from the traced waves (the first counted once, the second
 * for every further one of the w waves; a wave without such copies -- its blocks all once per
 * unit -- takes the other's share) and the once-per-unit copies, which join with their own hits. */
static double wave_share(const double *acc, const double *hit, double acc_once, double hit_once, uint64_t w)
{
  double h1 = acc[0] > 0 ? hit[0] / acc[0] : acc[1] > 0 ? hit[1] / acc[1] : 0;
  double h2 = acc[1] > 0 ? hit[1] / acc[1] : h1;
  double h_waves = w <= 1 ? h1 : (h1 + (double)(w - 1) * h2) / (double)w;
  double all = acc[0] + (w > 1 ? (double)(w - 1) * acc[1] : 0);
  return all + acc_once > 0 ? (h_waves * all + hit_once) / (all + acc_once) : 0;
}

/* Fills the shares of GM reads that find their lines in L2 and of GM writes that L2 absorbs
 * (writes allocate and make their tiles dirty, as in the event fidelity's L2, memory/l2.h: a
 * write to a tile that is resident and dirty stays in L2, any other write reaches HBM once).
 * nblk: the kernel's blocks per class; per_unit: the most blocks of a class one unit runs;
 * tensor_hits: 2 per GM tensor (reads, writes), each tensor's shares estimated the same way. */
static void trace_hits(const struct arch_chip *chip, struct mem_gm *gm, const struct core_kernel *k,
                       struct core__ixlog *ixlog, const uint64_t *nblk, const uint64_t *per_unit, double *hit_rd,
                       double *hit_wr, double *tensor_hits)
{
  int units = k->block_dim;
  uint64_t traced_blocks[MAX_CLASSES] = {0};
  struct trace_ctx x = {npu_xcalloc((size_t)units, sizeof *x.list), npu_xcalloc((size_t)units, sizeof *x.n),
                        npu_xcalloc((size_t)units, sizeof *x.cap), 0, false, 0, traced_blocks, NULL, ixlog, 0};
  struct trace_kernel tk = {k, &x};
  struct core_kernel wk = *k;
  wk.ctx = &tk;
  wk.unit_begin = k->unit_begin ? trace_begin : NULL;
  wk.unit_end = NULL; /* traced below, after the two waves */
  wk.block = trace_block;
  wk.block_of = k->block_of ? trace_block_of : NULL;
  wk.block_class = NULL;
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC};
  struct core__run r;
  core__run_init(&r, chip, gm, &wk, &o);
  r.gm_sink = sink;
  r.gm_sink_ctx = &x;
  x.run = &r;
  for (int w = 0; w < 2; w++) {
    x.wave = w;
    for (int u = 0; u < units; u++) core__generate(&r, &r.units[u]);
  }
  if (k->unit_end) { /* once per unit that ran, whenever its last block comes */
    x.once = true;
    for (int u = 0; u < units; u++) {
      if (!r.units[u].begun || r.err) continue;
      r.tps[u].sel = k->mode == CORE_MODE_VECTOR ? CORE_SUB_AIV0 : CORE_SUB_AIC;
      k->unit_end(&r.tps[u], k->ctx);
    }
    x.once = false;
  }
  core__run_release(&r);
  size_t total = 0;
  for (int u = 0; u < units; u++) total += x.n[u];
  struct tile_cache c = {0};
  uint64_t size = 1;
  while (size < 2 * total + 2) size <<= 1;
  c.keys = npu_xmalloc(size * sizeof *c.keys);
  c.stamp = npu_xcalloc(size, sizeof *c.stamp);
  c.dirty = npu_xcalloc(size, sizeof *c.dirty);
  c.mask = size - 1;
  c.cap = chip->l2.size_bytes;
  c.inserted = 1;
  /* once-per-unit classes: their traced copies count (blocks of the class / traced ones) times */
  double once_weight[MAX_CLASSES];
  for (int cl = 0; cl < MAX_CLASSES; cl++)
    once_weight[cl] = per_unit[cl] <= 1 && traced_blocks[cl] ? (double)nblk[cl] / (double)traced_blocks[cl] : 0;
  double hit[2][2] = {{0, 0}, {0, 0}}, acc[2][2] = {{0, 0}, {0, 0}}; /* [write][wave] */
  double hit_once[2] = {0, 0}, acc_once[2] = {0, 0};                 /* [write] */
  size_t nt = mem_gm_count(gm);
  double *tensor_acc[2] = {npu_xcalloc(nt + 1, sizeof(double)), npu_xcalloc(nt + 1, sizeof(double))};
  double *tensor_once[2] = {npu_xcalloc(nt + 1, sizeof(double)), npu_xcalloc(nt + 1, sizeof(double))};
  /* per tensor: [((write * 2 + wave) * 2 + hit) * nt + t], and once per unit [(8 + write * 2 + hit) * nt + t] */
  double *per = npu_xcalloc(12 * (nt + 1), sizeof(double));
#define PER_WAVE(wr, wave, h, t) per[(((size_t)(wr) * 2 + (wave)) * 2 + (h)) * (nt + 1) + (size_t)(t)]
#define PER_ONCE(wr, h, t) per[(8 + (size_t)(wr) * 2 + (h)) * (nt + 1) + (size_t)(t)]
  size_t *pos = npu_xcalloc((size_t)units, sizeof *pos);
  for (size_t done = 0; done < total;) /* round robin, one copy per unit at a time */
    for (int u = 0; u < units; u++) {
      if (pos[u] == x.n[u]) continue;
      const struct access *a = &x.list[u][pos[u]++];
      done++;
      int wr = !a->read;
      bool h = cache_touch(&c, &a->key, a->bytes, wr);
      long ti = mem_gm_index(gm, a->key.addr);
      double once = a->cls < 0 ? 1 : once_weight[a->cls];
      if (once > 0) {
        acc_once[wr] += once * (double)a->bytes;
        if (h) hit_once[wr] += once * (double)a->bytes;
        if (ti >= 0) {
          tensor_once[wr][ti] += once * (double)a->bytes;
          PER_ONCE(wr, 0, ti) += once * (double)a->bytes;
          if (h) PER_ONCE(wr, 1, ti) += once * (double)a->bytes;
        }
        continue;
      }
      acc[wr][a->wave] += (double)a->bytes;
      if (h) hit[wr][a->wave] += (double)a->bytes;
      if (ti >= 0) {
        tensor_acc[wr][ti] += (double)a->bytes;
        PER_WAVE(wr, a->wave, 0, ti) += (double)a->bytes;
        if (h) PER_WAVE(wr, a->wave, 1, ti) += (double)a->bytes;
      }
    }
  free(pos);
  free(c.keys);
  free(c.stamp);
  free(c.dirty);
  for (int u = 0; u < units; u++) free(x.list[u]);
  free(x.list);
  free(x.n);
  free(x.cap);
  /* waves of the whole kernel: blocks of the busiest unit */
  uint64_t w = 0;
  for (;; w++)
    if ((k->block_of ? k->block_of(k->ctx, 0, w) : w * (uint64_t)k->block_dim) >= k->nblocks ||
        (k->block_of && k->block_of(k->ctx, 0, w) == UINT64_MAX))
      break;
  for (int wr = 0; wr < 2; wr++) {
    double all = acc[wr][0] + (w > 1 ? (double)(w - 1) * acc[wr][1] : 0), traced = acc[wr][0] + acc[wr][1];
    double h_trace = wave_share(acc[wr], hit[wr], acc_once[wr], hit_once[wr], w);
    double h_fit = tensor_fit_hits(chip, gm, tensor_acc[wr], tensor_once[wr], nt, all, traced, acc_once[wr]);
    double h_kernel = h_trace > h_fit ? h_trace : h_fit;
    *(wr ? hit_wr : hit_rd) = h_kernel;
    /* each tensor's own share the same way: a weight streamed once misses while the tile every
     * block reuses hits, which one share for the kernel would blend */
    for (size_t t = 0; t < nt; t++) {
      double ta[2] = {PER_WAVE(wr, 0, 0, t), PER_WAVE(wr, 1, 0, t)}, th[2] = {PER_WAVE(wr, 0, 1, t), PER_WAVE(wr, 1, 1, t)};
      double oa = PER_ONCE(wr, 0, t), tall = ta[0] + (w > 1 ? (double)(w - 1) * ta[1] : 0), n = tall + oa;
      if (n <= 0) {
        tensor_hits[2 * t + (size_t)wr] = h_kernel;
        continue;
      }
      double tr = wave_share(ta, th, oa, PER_ONCE(wr, 1, t), w), tsize = (double)mem_gm_bytes(gm, t);
      double fit = tsize > (double)chip->l2.size_bytes ? (double)chip->l2.size_bytes / tsize : 1;
      double fh = n > tsize ? (n - tsize) * fit / n : 0;
      tensor_hits[2 * t + (size_t)wr] = tr > fh ? tr : fh;
    }
    free(tensor_acc[wr]);
    free(tensor_once[wr]);
  }
  free(per);
#undef PER_WAVE
#undef PER_ONCE
}

/* Affine classes: the first CLASS_EXACT present classes are sampled (the shortest blocks, where
 * a pipeline's fill is not yet amortised), then about CLASS_SAMPLES more spread evenly. */
#define CLASS_EXACT 4
#define CLASS_SAMPLES 12

/* The present classes not sampled, from the sampled ones below and above (linear in the class). */
static void interpolate_classes(struct klass *cls, int ncls, const bool *sampled)
{
  for (int c = 0; c < ncls; c++) {
    if (!cls[c].nrep || sampled[c]) continue;
    int lo = c - 1, hi = c + 1;
    while (lo >= 0 && !sampled[lo]) lo--;
    while (hi < ncls && !sampled[hi]) hi++;
    NPU_ASSERT(lo >= 0 && hi < ncls); /* the first and last present classes are sampled */
    double w = (double)(c - lo) / (double)(hi - lo);
    struct klass *x = &cls[c];
    memset(&x->r1, 0, sizeof x->r1);
    memset(&x->delta, 0, sizeof x->delta);
    x->r1.aic_used = cls[lo].r1.aic_used; /* not summed by res_axpy: a unit's cores */
    x->r1.aiv_used = cls[lo].r1.aiv_used;
    res_axpy(&x->r1, &cls[lo].r1, 1 - w);
    res_axpy(&x->r1, &cls[hi].r1, w);
    res_axpy(&x->delta, &cls[lo].delta, 1 - w);
    res_axpy(&x->delta, &cls[hi].delta, w);
    x->t1 = (1 - w) * cls[lo].t1 + w * cls[hi].t1;
    x->t2 = x->t1 + (1 - w) * (cls[lo].t2 - cls[lo].t1) + w * (cls[hi].t2 - cls[hi].t1);
  }
}

static uint64_t block_at(const struct core_kernel *k, int unit, uint64_t i)
{
  uint64_t b = k->block_of ? k->block_of(k->ctx, unit, i) : i * (uint64_t)k->block_dim + (uint64_t)unit;
  return b < k->nblocks ? b : UINT64_MAX;
}

static int class_of(const struct core_kernel *k, uint64_t b)
{
  return k->block_class ? k->block_class(k->ctx, b) : 0;
}

/* A full functional pass: every block through the executor, analytic GM timing; records where
 * indexed copies went in ixlog. */
static int functional_pass(const struct arch_chip *chip, struct mem_gm *gm, const struct core_kernel *k,
                           struct core__ixlog *ixlog, struct npu_diag *diag)
{
  struct core_launch_opts o = {.fidelity = CORE_FIDELITY_ANALYTIC, .functional = true};
  struct core__run r;
  core__run_init(&r, chip, gm, k, &o);
  r.be = &at_once_backend;
  r.ixlog = ixlog;
  for (int u = 0; u < r.nunits; u++) core__generate(&r, &r.units[u]);
  for (;;) {
    core__drain(&r);
    if (r.err || core__all_done(&r)) break;
    if (core__deadlock(&r)) break;
  }
  int rc = r.err;
  if (rc) *diag = r.diag;
  core__run_release(&r);
  return rc;
}

int core__run_analytic(const struct arch_chip *chip, struct mem_gm *gm,
                       const struct core_kernel *k, const struct core_launch_opts *opts,
                       struct core_result *out, struct npu_diag *diag)
{
  struct core__ixlog *ixlog = NULL;
  if (opts->functional) {
    ixlog = ixlog_create(mem_platform_cores(chip));
    int rc = functional_pass(chip, gm, k, ixlog, diag);
    if (rc) {
      ixlog_destroy(ixlog);
      return rc;
    }
  }
  struct klass *cls = npu_xcalloc(MAX_CLASSES, sizeof *cls);
  int ncls = 0;
  /* Walk the block sequence of every unit once: classes, representatives, counts. */
  int units_with_work = 0;
  for (int u = 0; u < k->block_dim; u++) {
    for (uint64_t i = 0;; i++) {
      uint64_t b = block_at(k, u, i);
      if (b == UINT64_MAX) break;
      if (i == 0) units_with_work++;
      int c = class_of(k, b);
      if (c < 0 || c >= MAX_CLASSES) {
        ixlog_destroy(ixlog);
        free(cls);
        return npu_diag_set(diag, NULL, 0, k->name, "block class %d outside 0..%d", c, MAX_CLASSES - 1), NPU_EINVAL;
      }
      if (c >= ncls) ncls = c + 1;
      if (cls[c].nrep < SAMPLE_K + 1) cls[c].rep[cls[c].nrep++] = b;
    }
  }
  if (!units_with_work) {
    ixlog_destroy(ixlog);
    free(cls);
    return npu_diag_set(diag, NULL, 0, k->name, "the kernel has no blocks"), NPU_EINVAL;
  }

  /* The hit shares from the kernel's reuse; whether the units run the same classes in step. */
  uint64_t nblk[MAX_CLASSES] = {0}, per_unit[MAX_CLASSES] = {0}, total_blocks = 0, apart = 0;
  for (int u = 0; u < k->block_dim; u++) {
    uint64_t mine[MAX_CLASSES] = {0};
    for (uint64_t i = 0;; i++) {
      uint64_t b = block_at(k, u, i), b0 = block_at(k, 0, i);
      if (b == UINT64_MAX) break;
      int c = class_of(k, b);
      if (b0 != UINT64_MAX && class_of(k, b0) != c) apart++;
      nblk[c]++;
      total_blocks++;
      if (++mine[c] > per_unit[c]) per_unit[c] = mine[c];
    }
  }
  /* In step: at most a quarter of the blocks differ in class from unit 0's at the same place (a
   * GEMM's edge tiles do not make its units drift; causal attention's dealt blocks do). */
  bool in_step = apart * 4 <= total_blocks;
  double hits[2], *tensor_hits = npu_xcalloc(2 * mem_gm_count(gm) + 2, sizeof *tensor_hits);
  trace_hits(chip, gm, k, ixlog, nblk, per_unit, &hits[0], &hits[1], tensor_hits);
  ixlog_destroy(ixlog);
  ixlog = NULL;
  /* The classes to sample: all, or for affine classes (core_kernel.class_affine) the first
   * CLASS_EXACT present ones, the last, and those nearest CLASS_SAMPLES even steps between;
   * the others are interpolated between the sampled ones around them. */
  bool *sampled = npu_xcalloc((size_t)(ncls ? ncls : 1), sizeof *sampled);
  int present = 0;
  for (int c = 0; c < ncls; c++) present += cls[c].nrep > 0;
  if (!k->class_affine || present <= CLASS_EXACT + CLASS_SAMPLES) {
    for (int c = 0; c < ncls; c++) sampled[c] = cls[c].nrep > 0;
  } else {
    int seen = 0, lastc = -1;
    for (int c = 0; c < ncls; c++)
      if (cls[c].nrep) {
        if (seen++ < CLASS_EXACT) sampled[c] = true;
        lastc = c;
      }
    sampled[lastc] = true;
    for (int i = 1; i < CLASS_SAMPLES; i++) {
      int want = (int)((double)lastc * i / CLASS_SAMPLES), best = -1;
      for (int c = 0; c < ncls; c++)
        if (cls[c].nrep && (best < 0 || abs(c - want) < abs(best - want))) best = c;
      sampled[best] = true;
    }
  }
  /* Each class's two samples: once for units in step (1/U of L2 and HBM each); for drifting
   * units, with what the others leave at their mean rate, until it settles within 1%. */
  const double full[2] = {chip->hbm.bw_bytes_per_s * chip->calib.hbm.value,
                          chip->l2.bw_bytes_per_s * chip->calib.l2.value};
  double shared[2] = {full[0] / units_with_work, full[1] / units_with_work};
  for (int pass = 0; pass < MAX_PASSES; pass++) {
    double rate[2] = {0, 0}; /* the unit's mean bytes/s on HBM and L2 in the steady state */
    for (int c = 0; c < ncls; c++) {
      if (!sampled[c]) continue;
      uint64_t seq[SAMPLE_K + 1];
      int last = cls[c].nrep - 1 > 0 ? cls[c].nrep - 1 : 0;
      for (int i = 0; i <= SAMPLE_K; i++) seq[i] = cls[c].rep[i < last ? i : last];
      int rc = run_sample(chip, gm, k, seq, 1, hits, tensor_hits, shared, &cls[c].r1, &cls[c].t1, diag);
      if (!rc) rc = run_sample(chip, gm, k, seq, SAMPLE_K + 1, hits, tensor_hits, shared, &cls[c].r2, &cls[c].t2, diag);
      if (rc) {
        free(tensor_hits);
        free(sampled);
        free(cls);
        return rc;
      }
      /* per further block: (T1+K - T1) / K */
      cls[c].delta = res_diff(&cls[c].r2, &cls[c].r1);
      struct core_result per = {0};
      res_axpy(&per, &cls[c].delta, 1.0 / SAMPLE_K);
      cls[c].delta = per;
      double dt = (cls[c].t2 - cls[c].t1) / SAMPLE_K;
      cls[c].t2 = cls[c].t1 + dt;
    }
    interpolate_classes(cls, ncls, sampled);
    for (int c = 0; c < ncls; c++) {
      if (!cls[c].nrep) continue;
      double dt = cls[c].t2 - cls[c].t1;
      const struct core_result *d = dt > 0 ? &cls[c].delta : &cls[c].r1;
      double span = dt > 0 ? dt : cls[c].t1, w = (double)nblk[c] / (double)total_blocks;
      if (span > 0) {
        rate[0] += w * (double)d->hbm_bytes / span;
        rate[1] += w * (double)(d->gm_read_bytes + d->gm_write_bytes) / span;
      }
    }
    if (in_step) break;
    bool settled = true;
    for (int l = 0; l < 2; l++) {
      double next = fmax(full[l] - (units_with_work - 1) * rate[l], full[l] / units_with_work);
      if (fabs(next - shared[l]) > 0.01 * shared[l]) settled = false;
      /* the first step leaves the in-step share at once; later ones go halfway, since near a
       * saturated link what the others leave swings with the rate it grants (L2 of a 910B2
       * FlashAttention backward swung between 0.41 and 0.58 TB/s undamped) */
      shared[l] = pass == 0 ? next : 0.5 * (shared[l] + next);
    }
    if (settled) break;
  }

  free(tensor_hits);
  free(sampled);

  /* Compose units. */
  struct core_result res = {0};
  double tmax = 0;
  int aic_used = 0, aiv_used = 0;
  for (int u = 0; u < k->block_dim; u++) {
    double t = 0;
    for (uint64_t i = 0;; i++) {
      uint64_t b = block_at(k, u, i);
      if (b == UINT64_MAX) break;
      const struct klass *x = &cls[class_of(k, b)];
      if (i == 0) {
        t = x->t1;
        res_axpy(&res, &x->r1, 1);
        aic_used += x->r1.aic_used;
        aiv_used += x->r1.aiv_used;
      } else {
        t += x->t2 - x->t1;
        res_axpy(&res, &x->delta, 1);
      }
    }
    if (t > tmax) tmax = t;
  }
  /* No schedule beats the memory roofline. */
  double hbm = chip->hbm.bw_bytes_per_s * chip->calib.hbm.value;
  double l2bw = chip->l2.bw_bytes_per_s * chip->calib.l2.value;
  double floor_s = (double)res.hbm_bytes / hbm;
  if ((double)(res.gm_read_bytes + res.gm_write_bytes) / l2bw > floor_s)
    floor_s = (double)(res.gm_read_bytes + res.gm_write_bytes) / l2bw;
  bool floored = floor_s > tmax;
  if (floored) tmax = floor_s;
  free(cls);
  res.aic_used = aic_used;
  res.aiv_used = aiv_used;
  core__result_finish(&res, chip, k->mode, tmax);
  if (floored) core__result_memory_bound(&res); /* the memory system set the time, not a pipe */
  *out = res;
  return 0;
}
