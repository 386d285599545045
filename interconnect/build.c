/*
 * build.c - the schedule builder algorithms emit into, at step or bulk fidelity (the rules are
 * in sched.h): step fidelity turns every send into a transfer and closes each rank's step with
 * a delay that reduces what it received; bulk fidelity merges a rank's consecutive steps on
 * the same link classes into one transfer per class and reduces once per phase.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "interconnect/interconnect_int.h"

void ic__b_init(struct ic__b *b, const struct ic_topo *t, const struct ic_comm *c,
                const struct ic_params *p, bool bulk, double lat_mult)
{
  memset(b, 0, sizeof *b);
  b->s = npu_xcalloc(1, sizeof *b->s);
  b->s->nranks = c->size;
  b->topo = t;
  b->g = c->ranks;
  b->lat_mult = lat_mult;
  b->overhead_s = p->task_overhead_s * lat_mult;
  b->gamma = p->reduce_bytes_per_s > 0 ? 1.0 / p->reduce_bytes_per_s : 0; /* 0: fused into the transfers */
  b->bulk = bulk;
  b->r = npu_xcalloc((size_t)c->size, sizeof *b->r);
  for (int i = 0; i < c->size; i++) b->r[i].last = b->r[i].phase_start = -1;
  b->active = npu_xmalloc((size_t)c->size * sizeof *b->active);
}

static uint32_t add_step(struct ic__b *b, const struct ic_step *st)
{
  struct ic_schedule *s = b->s;
  if (s->nsteps == b->capsteps) {
    b->capsteps = b->capsteps ? 2 * b->capsteps : 256;
    NPU_ASSERT(b->capsteps < UINT32_MAX);
    s->steps = npu_xrealloc(s->steps, b->capsteps * sizeof *s->steps);
  }
  s->steps[s->nsteps] = *st;
  return (uint32_t)s->nsteps++;
}

static void dep(struct ic__b *b, int64_t from, uint32_t to)
{
  if (from < 0) return;
  if (b->nedges == b->capedges) {
    b->capedges = b->capedges ? 2 * b->capedges : 512;
    b->edges = npu_xrealloc(b->edges, b->capedges * sizeof *b->edges);
  }
  b->edges[b->nedges++] = (struct ic__edge){(uint32_t)from, to};
}

static void push(uint32_t **a, int *n, int *cap, uint32_t v)
{
  if (*n == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    *a = npu_xrealloc(*a, (size_t)*cap * sizeof **a);
  }
  (*a)[(*n)++] = v;
}

static uint32_t xfer(struct ic__b *b, int src, int dst, double bytes, double pre, double post,
                     enum ic_class cls)
{
  struct ic_step st = {.amount = bytes, .pre_s = pre, .post_s = post, .src = src, .dst = dst,
                       .kind = IC_STEP_XFER, .cls = (uint8_t)cls};
  b->s->nxfers++;
  b->s->xfer_bytes += bytes;
  return add_step(b, &st);
}

static uint32_t delay(struct ic__b *b, int rank, double seconds)
{
  struct ic_step st = {.amount = seconds, .src = rank, .dst = -1, .kind = IC_STEP_DELAY};
  return add_step(b, &st);
}

static void touch(struct ic__b *b, int r)
{
  if (!b->r[r].active) {
    b->r[r].active = true;
    b->active[b->nactive++] = r;
  }
}

/*
 * Whether comm ranks a and b sit at the same index of their servers (the same rail). A bulk
 * transfer stands for a rank's steps of a class with one peer; among peers of equal load the
 * rail's is taken, so that the ranks of a server spread their merged scale-out transfers over
 * the other servers' NICs as their steps do (a permutation), rather than all naming the first
 * remote rank they meet (an incast on one NIC: a flat pairwise AllToAll over 4 DGX H100
 * servers ran 6x slow before).
 */
static bool rail(const struct ic__b *b, int a, int c)
{
  int per = ic_topo_devices_per_node(b->topo);
  return per > 0 && b->g[a] % per == b->g[c] % per;
}

void ic__b_send(struct ic__b *b, int src, int dst, double bytes)
{
  NPU_ASSERT(src != dst && bytes >= 0);
  int gs = b->g[src], gd = b->g[dst];
  enum ic_class cls = ic_topo_class(b->topo, gs, gd);
  double lat = ic_topo_latency_s(b->topo, gs, gd);
  if (!b->bulk) {
    uint32_t id = xfer(b, src, dst, bytes, b->overhead_s, lat * b->lat_mult, cls);
    dep(b, b->r[src].last, id);
    if (b->r[dst].last != b->r[src].last) dep(b, b->r[dst].last, id);
    push(&b->r[src].open, &b->r[src].nopen, &b->r[src].capopen, id);
    push(&b->r[dst].open, &b->r[dst].nopen, &b->r[dst].capopen, id);
    return;
  }
  struct ic__brank *r = &b->r[src];
  unsigned bit = 1u << cls;
  if (!(r->rmask & bit)) {
    r->rmask |= bit;
    r->rload[cls] = 0;
    r->rlat[cls] = 0;
    r->rbig[cls] = -1;
  }
  r->rload[cls] = ic_class_shared(cls) ? r->rload[cls] + bytes : fmax(r->rload[cls], bytes);
  r->rlat[cls] = fmax(r->rlat[cls], lat);
  if (bytes > r->rbig[cls] || (bytes == r->rbig[cls] && !rail(b, src, r->rpeer[cls]) && rail(b, src, dst))) {
    r->rbig[cls] = bytes;
    r->rpeer[cls] = dst;
  }
  touch(b, src);
  touch(b, dst);
}

void ic__b_reduce(struct ic__b *b, int rank, double bytes)
{
  if (!b->bulk) {
    b->r[rank].reduce += bytes;
    return;
  }
  b->r[rank].preduce += bytes;
  touch(b, rank);
}

/* Bulk: emit rank r's open segment, one transfer per class, chained after its last step. */
static void flush(struct ic__b *b, int rank)
{
  struct ic__brank *r = &b->r[rank];
  if (!r->smask) return;
  uint32_t ids[IC_CLASS_COUNT];
  int n = 0;
  for (int c = 0; c < IC_CLASS_COUNT; c++) {
    if (!(r->smask & (1u << c))) continue;
    int peer = r->speer[c];
    uint32_t id = xfer(b, rank, peer, r->sload[c], r->spre[c], r->spost[c], (enum ic_class)c);
    dep(b, r->last, id);
    if (b->r[peer].phase_start != r->last) dep(b, b->r[peer].phase_start, id);
    push(&b->r[peer].in, &b->r[peer].nin, &b->r[peer].capin, id);
    ids[n++] = id;
  }
  if (n == 1) {
    r->last = ids[0];
  } else {
    uint32_t sync = delay(b, rank, 0);
    for (int i = 0; i < n; i++) dep(b, ids[i], sync);
    r->last = sync;
  }
  r->smask = 0;
}

static void end_step(struct ic__b *b, int rank)
{
  struct ic__brank *r = &b->r[rank];
  if (!b->bulk) {
    if (r->nopen == 0 && r->reduce == 0) return;
    uint32_t id = delay(b, rank, r->reduce * b->gamma);
    if (r->nopen == 0) dep(b, r->last, id);
    for (int i = 0; i < r->nopen; i++) dep(b, r->open[i], id);
    r->last = id;
    r->nopen = 0;
    r->reduce = 0;
    return;
  }
  if (!r->rmask) return;
  if (r->smask != r->rmask) {
    flush(b, rank);
    r->smask = r->rmask;
    for (int c = 0; c < IC_CLASS_COUNT; c++) {
      if (!(r->rmask & (1u << c))) continue;
      r->sload[c] = r->spre[c] = r->spost[c] = 0;
      r->sbig[c] = -1;
    }
  }
  for (int c = 0; c < IC_CLASS_COUNT; c++) {
    if (!(r->rmask & (1u << c))) continue;
    /* the largest step's peer; with rep_first the first step's (a permutation), unless a
     * later step's is the rail's and the first's is not */
    bool take = b->rep_first ? r->sbig[c] < 0 || (!rail(b, rank, r->speer[c]) && rail(b, rank, r->rpeer[c]))
                             : r->rbig[c] > r->sbig[c];
    if (take) {
      r->sbig[c] = r->rbig[c];
      r->speer[c] = r->rpeer[c];
    }
    r->sload[c] += r->rload[c];
    r->spre[c] += b->overhead_s;
    r->spost[c] += r->rlat[c] * b->lat_mult;
  }
  r->rmask = 0;
}

void ic__b_rep_first(struct ic__b *b, bool on)
{
  b->rep_first = on;
}

void ic__b_end_step(struct ic__b *b, const int *m, int k)
{
  for (int i = 0; i < k; i++) end_step(b, m[i]);
}

void ic__b_end_phase(struct ic__b *b)
{
  if (!b->bulk) return;
  for (int i = 0; i < b->nactive; i++) flush(b, b->active[i]);
  for (int i = 0; i < b->nactive; i++) {
    struct ic__brank *r = &b->r[b->active[i]];
    uint32_t id = delay(b, b->active[i], r->preduce * b->gamma);
    dep(b, r->last, id);
    for (int j = 0; j < r->nin; j++)
      if ((int64_t)r->in[j] != r->last) dep(b, r->in[j], id);
    r->last = id;
    r->nin = 0;
    r->preduce = 0;
  }
  for (int i = 0; i < b->nactive; i++) {
    struct ic__brank *r = &b->r[b->active[i]];
    r->phase_start = r->last;
    r->active = false;
  }
  b->nactive = 0;
}

struct ic_schedule *ic__b_finish(struct ic__b *b)
{
  ic__b_end_phase(b);
  struct ic_schedule *s = b->s;
  int p = s->nranks;
  size_t n = s->nsteps;
  uint32_t *count = npu_xcalloc(n + 1, sizeof *count);
  for (size_t e = 0; e < b->nedges; e++) {
    count[b->edges[e].from]++;
    s->steps[b->edges[e].to].ndeps++;
  }
  uint32_t off = 0;
  for (size_t i = 0; i < n; i++) {
    s->steps[i].succ = off;
    s->steps[i].nsucc = 0;
    off += count[i];
  }
  s->succ = npu_xmalloc((b->nedges ? b->nedges : 1) * sizeof *s->succ);
  for (size_t e = 0; e < b->nedges; e++) {
    struct ic_step *f = &s->steps[b->edges[e].from];
    s->succ[f->succ + f->nsucc++] = b->edges[e].to;
  }
  free(count);
  s->rank_steps = npu_xcalloc((size_t)p, sizeof *s->rank_steps);
  for (size_t i = 0; i < n; i++) {
    const struct ic_step *st = &s->steps[i];
    s->rank_steps[st->src]++;
    if (st->dst >= 0 && st->dst != st->src) s->rank_steps[st->dst]++;
  }
  for (int i = 0; i < p; i++) {
    free(b->r[i].open);
    free(b->r[i].in);
  }
  free(b->r);
  free(b->active);
  free(b->edges);
  b->r = NULL;
  b->active = NULL;
  b->edges = NULL;
  b->s = NULL;
  return s;
}
