/*
 * event.c - the event fidelity's GM backend and driver: one SimGrid actor runs the whole
 * chip. Core-local instructions resolve in dataflow order (exec.c); a GM copy waits until the
 * engine's clock reaches its start, then becomes one or two SimGrid flows (L2 hits from the L2
 * host, misses from HBM; for a write, the bytes absorbed by dirty lines to L2, the rest -- the
 * write-back of the lines it makes dirty, memory/l2.h -- to HBM) on the chip's memory platform
 * (memory/platform.h), sharing the core's port, L2 and HBM bandwidth with every other flow in
 * flight. The actor sleeps until the earliest of the next GM start and the next flow
 * completion, so each GM copy costs two engine interactions and no local instruction costs any.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "cores/exec_int.h"
#include "engine/engine.h"
#include "memory/dma.h"
#include "memory/gm.h"
#include "memory/platform.h"

struct flight {
  struct npu_xfer *x;
  int core, pipe;
  bool miss;
};

static bool ev_start(struct core__run *r, struct core__core *c, int pipe, double t)
{
  c->pipe[pipe].st = P_ISSUE;
  core__heap_push(r, t, c->id, pipe);
  return false;
}

const struct core__gm_backend core__event_backend = {"event", ev_start};

struct event_state {
  sg_host_t *hbm, *l2, *dsm, *core, *mte3, *fix; /* per device / per core; dsm: a cluster's
                                                    network (multicast chips) */
  struct flight *fl;
  struct npu_xfer **xs; /* the handles of fl, for waiting */
  int nfl, cap;
};

/* Touch the L2 lines of a GM tile; returns the share of its bytes that L2 serves: for a read the
 * bytes that were resident, for a write the bytes on lines already dirty (the rest cost an HBM
 * write: memory/l2.h). A tile whose address is unknown (fresh: an indexed copy of a timing-only
 * run, see core__gm_tile) touches as many lines, all new: no hits, and they age the resident
 * lines as new lines do. */
static double touch_tile(struct mem_l2 *l2, const struct core_tile *g, bool fresh, bool write)
{
  uint64_t (*touch)(struct mem_l2 *, uint64_t, uint64_t) =
      fresh ? mem_l2_touch_fresh : write ? mem_l2_write : mem_l2_touch;
  uint32_t rows = g->rows, cols = g->cols;
  uint64_t es_bits = (uint64_t)npu_dtype_bits((enum npu_dtype)g->dtype);
  uint64_t row_bytes = ((uint64_t)cols * es_bits + 7) / 8;
  uint64_t ld_bytes = ((uint64_t)core_tile_ld(g) * es_bits + 7) / 8;
  uint64_t hits = 0, total = 0;
  if (ld_bytes == row_bytes) {
    total = row_bytes * rows;
    hits = touch(l2, g->addr, total);
  } else {
    for (uint32_t i = 0; i < rows; i++) {
      hits += touch(l2, g->addr + i * ld_bytes, row_bytes);
      total += row_bytes;
    }
  }
  return total ? (double)hits / (double)total : 0;
}

/* A flow of n bytes between memory host mem and a core's endpoint (from mem for a read), in flight. */
static void start_flow(struct event_state *s, bool read, sg_host_t mem, sg_host_t endpoint, uint64_t n, int core,
                       int pipe, bool miss)
{
  struct npu_xfer *x = read ? npu_xfer_start(mem, endpoint, (double)n, 0) : npu_xfer_start(endpoint, mem, (double)n, 0);
  if (s->nfl == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->fl = npu_xrealloc(s->fl, (size_t)s->cap * sizeof *s->fl);
    s->xs = npu_xrealloc(s->xs, (size_t)s->cap * sizeof *s->xs);
  }
  s->xs[s->nfl] = x;
  s->fl[s->nfl++] = (struct flight){x, core, pipe, miss};
}

static void issue(struct core__run *r, struct event_state *s, int core, int pipe)
{
  struct core__core *c = &r->cores[core];
  struct core__pipe *p = &c->pipe[pipe];
  const struct core_instr *in = &p->q[p->head];
  const struct core_copy *cp = &in->u.copy;
  bool read = cp->src.space == MEM_GM;
  /* the L2 sees the tile the copy really touches: an indexed copy's row in a functional run,
   * fresh lines when its index is unknown (timing-only; all misses, no reuse) */
  struct core_tile g;
  bool known = core__gm_tile(r, c, cp, &g);
  int dev = core / r->per_rank, home = dev;
  if (r->ranks > 1) {
    home = mem_gm_device(r->gm, g.addr);
    if (home < 0 || home >= r->ranks) home = dev; /* a timing-only indexed copy's row: unknown */
  }
  uint64_t bytes = core__gm_bytes(r->chip, in);
  sg_host_t endpoint = read ? s->core[core] : cp->src.space == MEM_UB ? s->mte3[core] : s->fix[core];
  NPU_ASSERT(endpoint != NULL);
  p->st = P_INFLIGHT;
  if (home != dev) { /* another device's HBM, across the link between the two */
    r->res.link_bytes += bytes;
    if (read) r->res.gm_read_bytes += bytes; else r->res.gm_write_bytes += bytes;
    p->parts = 1;
    p->miss = p->remote = true;
    start_flow(s, read, s->hbm[home], endpoint, bytes, core, pipe, true);
    return;
  }
  double hit = touch_tile(r->l2_of[dev], &g, !known, !read);
  uint64_t hit_bytes = (uint64_t)llround((double)bytes * hit), miss_bytes = bytes - hit_bytes;
  /* a multicast read: L2 serves 1/g of the hits, the cluster's network the rest */
  uint64_t l2_hit = core__multicast_share(in, hit_bytes), peer_bytes = hit_bytes - l2_hit;
  if (read) r->res.gm_read_bytes += bytes - peer_bytes; else r->res.gm_write_bytes += bytes;
  r->res.l2_hit_bytes += l2_hit;
  r->res.hbm_bytes += miss_bytes;
  p->parts = 0;
  p->miss = miss_bytes > 0;
  for (int part = 0; part < 3; part++) {
    uint64_t n = part == 0 ? l2_hit : part == 1 ? miss_bytes : peer_bytes;
    if (!n) continue;
    sg_host_t mem = part == 0 ? s->l2[dev] : part == 1 ? s->hbm[dev] : s->dsm[dev];
    start_flow(s, read, mem, endpoint, n, core, pipe, part == 1);
    p->parts++;
  }
}

static sg_host_t host(const char *prefix, const char *name, bool required)
{
  char buf[128];
  snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", name);
  sg_host_t h = npu_engine_host(buf);
  if (!h && required) NPU_PANIC("the platform has no host %s: load the chip's memory platform", buf);
  return h;
}

int core__run_event(struct core__run *r)
{
  NPU_ASSERT(npu_engine_started());
  struct event_state s = {0};
  s.hbm = npu_xcalloc((size_t)r->ranks, sizeof *s.hbm);
  s.l2 = npu_xcalloc((size_t)r->ranks, sizeof *s.l2);
  s.dsm = npu_xcalloc((size_t)r->ranks, sizeof *s.dsm);
  s.core = npu_xcalloc((size_t)r->ncores, sizeof *s.core);
  s.mte3 = npu_xcalloc((size_t)r->ncores, sizeof *s.mte3);
  s.fix = npu_xcalloc((size_t)r->ncores, sizeof *s.fix);
  uint64_t gm_base, gm_span;
  mem_gm_range(r->gm, &gm_base, &gm_span);
  for (int d = 0; d < r->ranks; d++) {
    char prefix[80];
    if (r->ranks > 1) /* a server's devices: mem_platform_group_xml */
      snprintf(prefix, sizeof prefix, "d%d.", d);
    else
      snprintf(prefix, sizeof prefix, "%s", r->host_prefix);
    s.hbm[d] = host(prefix, "hbm", true);
    s.l2[d] = host(prefix, "l2", true);
    s.dsm[d] = host(prefix, "dsm", r->chip->dma.multicast > 1);
    for (int li = 0; li < r->per_rank; li++) {
      int i = d * r->per_rank + li;
      char name[48];
      snprintf(name, sizeof name, "c%d", li);
      s.core[i] = host(prefix, name, true);
      snprintf(name, sizeof name, "c%d.mte3", li);
      s.mte3[i] = host(prefix, name, mem_platform_core_has(r->chip, li, ARCH_PATH_UB_TO_GM));
      snprintf(name, sizeof name, "c%d.fix", li);
      s.fix[i] = host(prefix, name, mem_platform_core_has(r->chip, li, ARCH_PATH_L0C_TO_GM));
    }
    r->l2_of[d] = mem_l2_create(r->chip->l2.size_bytes, gm_base, gm_span);
  }
  r->l2 = r->l2_of[0];
  if (r->trace) {
    for (int i = 0; i < r->ncores; i++) {
      const struct core__core *c = &r->cores[i];
      if (c->unit < 0) continue;
      char name[64], dev[16] = "";
      int li = c->id % r->per_rank;
      if (r->ranks > 1) snprintf(dev, sizeof dev, "d%d.", c->id / r->per_rank);
      if (c->kind == CORE_KIND_AIV)
        snprintf(name, sizeof name, "%saiv%d", dev, li - r->chip->aic_count);
      else
        snprintf(name, sizeof name, "%s%s%d", dev, c->kind == CORE_KIND_AIC ? "aic" : "core", li);
      npu_trace_name(r->trace, c->id, -1, name);
      for (int p = 0; p < CORE_PIPE_COUNT; p++)
        if (c->pipes & (1u << p)) npu_trace_name(r->trace, c->id, p, core_pipe_name((enum core_pipe)p));
    }
  }
  npu_engine_sleep(r->chip->launch_overhead_s);
  r->t0 = npu_engine_clock();
  r->end = r->t0;
  for (int i = 0; i < r->ncores; i++)
    for (int p = 0; p < CORE_PIPE_COUNT; p++) r->cores[i].pipe[p].free_at = r->t0;
  for (int u = 0; u < r->nunits; u++) core__generate(r, &r->units[u]);
  for (uint64_t iter = 0;; iter++) {
    core__drain(r);
    if (r->err) break;
    if (r->opts.progress && iter % 4096 == 0) { /* blocks handed to the units so far */
      uint64_t issued = 0;
      for (int u = 0; u < r->nunits; u++) issued += r->units[u].next;
      npu_progress_note(r->opts.progress, r->k->name, (double)issued, (double)r->k->nblocks);
    }
    double now = npu_engine_clock();
    while (r->nheap && r->heap[0].t <= now) {
      struct core__heap_item it = core__heap_pop(r);
      issue(r, &s, it.core, it.pipe);
    }
    if (s.nfl == 0 && r->nheap == 0) {
      if (core__all_done(r)) break;
      if (core__deadlock(r)) break;
      continue;
    }
    double timeout = r->nheap ? r->heap[0].t - now : -1;
    if (s.nfl == 0) {
      npu_engine_sleep(timeout);
      continue;
    }
    ssize_t k = npu_xfer_wait_any(s.xs, (size_t)s.nfl, timeout);
    if (k < 0) continue;
    struct flight f = s.fl[k];
    npu_xfer_release(f.x);
    s.fl[k] = s.fl[--s.nfl];
    s.xs[k] = s.xs[s.nfl];
    struct core__pipe *p = &r->cores[f.core].pipe[f.pipe];
    if (--p->parts == 0)
      core__gm_finish(r, &r->cores[f.core], f.pipe, npu_engine_clock(), p->miss ? 1.0 : 0.0);
  }
  for (int i = 0; i < s.nfl; i++) npu_xfer_release(s.fl[i].x);
  free(s.fl);
  free(s.xs);
  free(s.hbm);
  free(s.l2);
  free(s.dsm);
  free(s.core);
  free(s.mte3);
  free(s.fix);
  return r->err;
}

struct standalone {
  const struct arch_chip *chip;
  struct mem_gm *gm;
  const struct core_kernel *k;
  const struct core_launch_opts *opts;
  struct core_result *out;
  struct npu_diag *diag;
  int rc;
};

static void standalone_actor(void *arg)
{
  struct standalone *s = arg;
  s->rc = core_launch(s->chip, s->gm, s->k, s->opts, s->out, s->diag);
}

int core_launch_standalone(const struct arch_chip *chip, struct mem_gm *gm,
                           const struct core_kernel *k, const struct core_launch_opts *opts,
                           struct core_result *out, struct npu_diag *diag)
{
  if (opts->fidelity == CORE_FIDELITY_ANALYTIC) return core_launch(chip, gm, k, opts, out, diag);
  struct npu_buf xml = {0};
  mem_platform_chip_xml(chip, "", &xml);
  int rc = npu_engine_init(npu_buf_str(&xml), diag);
  npu_buf_release(&xml);
  if (rc) return rc;
  struct standalone s = {chip, gm, k, opts, out, diag, 0};
  npu_engine_spawn("chip", npu_engine_host("l2"), standalone_actor, &s);
  npu_engine_run();
  return s.rc;
}
