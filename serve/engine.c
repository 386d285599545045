/*
 * engine.c - continuous batching with a paged KV cache, replicas side by side (engine.h).
 *
 * Per replica: a running list in admission order (the preemption victim is its last), a
 * waiting queue (preempted sequences go back to its front), free KV blocks, and the prefix
 * groups it has cached (pinned blocks, never evicted). Steps are simulated one by one; a step
 * of B running sequences costs what sv_step_s says for its tokens, rows and context.
 */
#include "serve/engine.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ------------------------------------------------------------------ gaps */

void sv_gaps_add(struct sv_gaps *g, double v)
{
  int b = v <= 1e-6 ? 0 : (int)(log10(v / 1e-6) * 1000.0);
  if (b >= SV_GAP_BINS) b = SV_GAP_BINS - 1;
  g->count[b] += 1;
  g->n += 1;
  g->sum += v;
}

double sv_gaps_quantile(const struct sv_gaps *g, double q)
{
  if (!g || g->n <= 0) return 0;
  double want = q * g->n, acc = 0;
  for (int b = 0; b < SV_GAP_BINS; b++) {
    if (g->count[b] <= 0) continue;
    if (acc + g->count[b] >= want) {
      double f = (want - acc) / g->count[b];
      return 1e-6 * pow(10.0, (b + f) / 1000.0);
    }
    acc += g->count[b];
  }
  return 1e-6 * pow(10.0, SV_GAP_BINS / 1000.0);
}

/* ------------------------------------------------------------------ timeline */

/* Halve the timeline's resolution: pairs of bins merge, the width doubles. */
static void tl_coarsen(struct sv_tl *tl)
{
  double *v[] = {tl->busy_s, tl->running_s, tl->waiting_s, tl->kv_s, tl->preemptions, tl->tokens, tl->arrivals};
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    for (int i = 0; i < SV_TL_BINS / 2; i++) v[k][i] = v[k][2 * i] + v[k][2 * i + 1];
    memset(v[k] + SV_TL_BINS / 2, 0, SV_TL_BINS / 2 * sizeof *v[k]);
  }
  tl->width_s *= 2;
  tl->n = (tl->n + 1) / 2;
}

/* The bin of time t, merging pairs of bins until t falls inside the last. */
static int tl_bin(struct sv_tl *tl, double t)
{
  if (tl->width_s <= 0) tl->width_s = 1e-3;
  while (t >= tl->width_s * SV_TL_BINS) tl_coarsen(tl);
  int b = t > 0 ? (int)(t / tl->width_s) : 0;
  if (b >= SV_TL_BINS) b = SV_TL_BINS - 1;
  if (b + 1 > tl->n) tl->n = b + 1;
  return b;
}

static void tl_merge(struct sv_tl *dst, const struct sv_tl *src)
{
  struct sv_tl s = *src;
  if (dst->width_s <= 0) dst->width_s = 1e-3;
  if (s.width_s <= 0) s.width_s = 1e-3;
  while (dst->width_s < s.width_s) tl_coarsen(dst);
  while (s.width_s < dst->width_s) tl_coarsen(&s);
  double *d[] = {dst->busy_s, dst->running_s, dst->waiting_s, dst->kv_s, dst->preemptions, dst->tokens, dst->arrivals};
  const double *v[] = {s.busy_s, s.running_s, s.waiting_s, s.kv_s, s.preemptions, s.tokens, s.arrivals};
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
    for (int i = 0; i < SV_TL_BINS; i++) d[k][i] += v[k][i];
  if (s.n > dst->n) dst->n = s.n;
}

/* ------------------------------------------------------------------ replicas */

struct seq {
  int req;
  int drafts;        /* draft tokens verified this step (speculative decoding) */
  int computed;      /* tokens whose KV is in the cache (prefix cache hits included) */
  int target;        /* tokens to prefill: the prompt, plus what was generated before a preemption */
  int cached;        /* of computed, blocks-worth served by a cached prefix (not its own blocks) */
  long blocks;       /* its own blocks */
  double last_s;     /* its last token */
  int chunk;         /* tokens scheduled this step (0: none) */
};

struct deque {
  int *v;
  size_t head, n, cap; /* cap a power of two */
};

static void dq_push(struct deque *d, int x, bool front)
{
  if (d->n == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 64;
    int *v = npu_xmalloc(cap * sizeof *v);
    for (size_t i = 0; i < d->n; i++) v[i] = d->v[(d->head + i) & (d->cap - 1)];
    free(d->v);
    d->v = v;
    d->head = 0;
    d->cap = cap;
  }
  if (front) {
    d->head = (d->head + d->cap - 1) & (d->cap - 1);
    d->v[d->head] = x;
  } else {
    d->v[(d->head + d->n) & (d->cap - 1)] = x;
  }
  d->n++;
}

static int dq_front(const struct deque *d)
{
  return d->v[d->head];
}

static void dq_pop(struct deque *d)
{
  d->head = (d->head + 1) & (d->cap - 1);
  d->n--;
}

struct replica {
  double t;
  struct seq *run;
  int nrun;
  struct deque wait;
  long free_blocks;
  unsigned char *cached;  /* per prefix group: its blocks are pinned here */
  long pinned;            /* blocks the cached prefixes hold */
};

struct engine {
  const struct sv_engine_cfg *cfg;
  sv_step_fn step;
  const void *ctx;
  struct sv_request *req;
  struct sv_req_out *out;
  int *generated;         /* per request: tokens generated so far */
  uint64_t *rng;          /* per request: its acceptance draws (speculative decoding) */
  int groups;             /* prefix groups */
  struct replica *rep;
  struct sv_engine_stats *st;
  bool record;
};

static long blocks_for(const struct engine *e, long tokens)
{
  return (tokens + e->cfg->block_tokens - 1) / e->cfg->block_tokens;
}

/* Own blocks a sequence needs to hold `tokens` of context, its cached prefix blocks aside. */
static long need_blocks(const struct engine *e, const struct seq *s, long tokens)
{
  long b = blocks_for(e, tokens) - s->cached / e->cfg->block_tokens;
  return b > 0 ? b : 0;
}

/* Preempt the last running sequence: free its blocks, queue it again at the front. */
static void preempt_last(struct engine *e, struct replica *r)
{
  struct seq *s = &r->run[--r->nrun];
  r->free_blocks += s->blocks;
  e->out[s->req].preemptions++;
  e->st->preemptions++;
  e->st->tl.preemptions[tl_bin(&e->st->tl, r->t)] += 1;
  dq_push(&r->wait, s->req, true);
}

/* A waiting request as a sequence to admit: recompute what it had, reuse a cached prefix. */
static struct seq admit_seq(const struct engine *e, const struct replica *r, int q)
{
  const struct sv_request *rq = &e->req[q];
  struct seq s = {q, 0, 0, rq->prompt + e->generated[q], 0, 0, 0, 0};
  if (e->cfg->prefix_caching && rq->prefix >= 0 && r->cached[rq->prefix]) {
    int c = rq->prefix_tokens / e->cfg->block_tokens * e->cfg->block_tokens;
    if (c >= s.target) c = (s.target - 1) / e->cfg->block_tokens * e->cfg->block_tokens; /* one token to compute */
    s.computed = s.cached = c;
  }
  if (rq->kv_ready && !e->generated[q]) s.computed = s.target; /* its prompt's KV came with it */
  s.last_s = e->out[q].finish_s; /* its last token before a preemption (0: none yet) */
  return s;
}

static int outstanding(const struct replica *r)
{
  return r->nrun + (int)r->wait.n;
}

static int route(struct engine *e, int q, int *rr)
{
  const struct sv_engine_cfg *c = e->cfg;
  const struct sv_request *rq = &e->req[q];
  if (c->route == SV_ROUTE_FIXED) return rq->replica;
  if (c->route == SV_ROUTE_ROUND_ROBIN) return (*rr)++ % c->replicas;
  int best = -1;
  if (c->route == SV_ROUTE_PREFIX && rq->prefix >= 0)
    for (int i = 0; i < c->replicas; i++)
      if (e->rep[i].cached[rq->prefix] && (best < 0 || outstanding(&e->rep[i]) < outstanding(&e->rep[best])))
        best = i;
  if (best >= 0) return best;
  best = 0;
  for (int i = 1; i < c->replicas; i++)
    if (outstanding(&e->rep[i]) < outstanding(&e->rep[best])) best = i;
  return best;
}

/* Pin the blocks of q's prefix on r once its prefill has passed them (when the cache has room). */
static void cache_prefix(struct engine *e, struct replica *r, const struct seq *s)
{
  const struct sv_request *rq = &e->req[s->req];
  if (!e->cfg->prefix_caching || rq->prefix < 0 || r->cached[rq->prefix] || s->computed < rq->prefix_tokens) return;
  long b = rq->prefix_tokens / e->cfg->block_tokens;
  if (b <= 0 || b > r->free_blocks) return;
  r->free_blocks -= b;
  r->pinned += b;
  r->cached[rq->prefix] = 1;
}

int sv_graph_sizes(int max_seqs, int *out)
{
  int n = 0;
  for (int v = 1; v <= 512 && n < SV_GRAPH_MAX; v = v < 8 ? 2 * v : v < 256 ? v + 8 : v + 16) {
    out[n++] = v;
    if (v >= max_seqs) break;
  }
  return n;
}

/* Keys a query at context n reads in a layer of window w (0: all). */
static double window_tokens(int w, double n)
{
  return w > 0 && n > w ? w : n;
}

/* The prefill pairs of a chunk of c queries after p cached tokens in a layer of window w, as the
 * integral of min(x, w) over [p, p + c] (c (p + c / 2) without a window, as prefill_pairs). */
static double window_pairs(int w, double p, double c)
{
  if (w <= 0 || p + c <= w) return c * (p + c / 2.0);
  if (p >= w) return c * w;
  return ((double)w * w - p * p) / 2.0 + (p + c - w) * w;
}

/* The token count a decode-only step runs at (graph capture sizes). */
static int padded(const struct sv_engine_cfg *c, int tokens)
{
  for (int i = 0; i < c->ngraph; i++)
    if (c->graph_sizes[i] >= tokens) return c->graph_sizes[i];
  return tokens;
}

/* splitmix64: a request's own stream of acceptance draws */
static uint64_t next_u64(uint64_t *x)
{
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Draft tokens sequence s proposes this step: spec_tokens, none past its last output token. */
static int drafts_for(const struct engine *e, const struct seq *s)
{
  int left = e->req[s->req].output - e->generated[s->req] - 1;
  int k = e->cfg->spec_tokens;
  return k < left ? k : left > 0 ? left : 0;
}

/* How many of request q's d drafts are accepted: each in turn with spec_acceptance, until the
 * first rejection (the verifier keeps the longest accepted prefix). */
static int accepted(struct engine *e, int q, int d)
{
  int a = 0;
  while (a < d && (double)(next_u64(&e->rng[q]) >> 11) * 0x1.0p-53 < e->cfg->spec_acceptance) a++;
  return a;
}

/* Schedule and run one step of replica ri. Returns false when nothing could be scheduled. */
static bool step_replica(struct engine *e, int ri)
{
  const struct sv_engine_cfg *c = e->cfg;
  struct replica *r = &e->rep[ri];
  int budget = c->token_budget;
  bool preempted = false, prefill_step = false;
  /* v0 (no chunking): a step of whole new prompts when the first waiting one can be admitted */
  if (!c->chunked && r->wait.n && r->nrun < c->max_seqs) {
    struct seq s = admit_seq(e, r, dq_front(&r->wait));
    long want = c->reserve_full ? need_blocks(e, &s, e->req[s.req].prompt + e->req[s.req].output)
                                : need_blocks(e, &s, s.target);
    prefill_step = want <= r->free_blocks;
  }
  for (int i = 0; i < r->nrun; i++) r->run[i].chunk = r->run[i].drafts = 0;
  if (!prefill_step) {
    for (int i = 0; i < r->nrun && budget > 0; i++) {
      struct seq *s = &r->run[i];
      int tok = s->computed < s->target ? s->target - s->computed : 1 + drafts_for(e, s);
      if (!c->chunked && s->computed < s->target) continue; /* v0: partial prefills do not exist */
      if (tok > budget) tok = budget;
      long need = need_blocks(e, s, (long)s->computed + tok) - s->blocks;
      while (need > r->free_blocks && r->nrun > i) { /* free blocks by preempting the newest */
        preempt_last(e, r);
        preempted = true;
      }
      if (i >= r->nrun) break; /* it preempted itself */
      if (need > 0) {
        r->free_blocks -= need;
        s->blocks += need;
      }
      s->chunk = tok;
      budget -= tok;
    }
  }
  /* admit waiting requests into what the budget leaves (not in a step that preempted) */
  if (!preempted && (c->chunked || prefill_step)) {
    int admitted = 0;
    while (r->wait.n && r->nrun < c->max_seqs && budget > 0) {
      struct seq s = admit_seq(e, r, dq_front(&r->wait));
      int tok = s.computed < s.target ? s.target - s.computed : 1; /* a prompt, or its KV arrived: a decode */
      if (c->chunked && tok > budget) tok = budget;
      if (!c->chunked && tok > budget && admitted) break; /* v0: whole prompts, at least one */
      long full = c->reserve_full ? need_blocks(e, &s, e->req[s.req].prompt + e->req[s.req].output)
                                  : need_blocks(e, &s, (long)s.computed + tok);
      if (full > r->free_blocks) break;
      r->free_blocks -= full;
      s.blocks = full;
      s.chunk = tok;
      budget -= tok;
      dq_pop(&r->wait);
      e->out[s.req].cached_tokens += s.cached;
      e->st->cached_tokens += s.cached;
      r->run[r->nrun++] = s;
      admitted++;
    }
  }
  /* the step */
  struct sv_step sp = {0};
  int prefill_tokens = 0;
  for (int i = 0; i < r->nrun; i++) {
    const struct seq *s = &r->run[i];
    if (!s->chunk) continue;
    sp.seqs++;
    sp.tokens += s->chunk;
    if (s->computed >= s->target) {
      sp.decode++;
      sp.rows += s->chunk; /* the token and each draft is sampled (verified) */
      sp.decode_context += s->computed + 1;
      sp.decode_window_context += window_tokens(e->cfg->window, s->computed + 1);
      if (s->chunk > 1) {
        sp.draft_seqs++;
        if (s->chunk - 1 > sp.draft_passes) sp.draft_passes = s->chunk - 1;
      }
    } else {
      prefill_tokens += s->chunk;
      sp.prefill_pairs += (double)s->chunk * (s->computed + s->chunk / 2.0);
      sp.prefill_window_pairs += window_pairs(e->cfg->window, s->computed, s->chunk);
      if (s->computed + s->chunk > sp.prefill_context) sp.prefill_context = s->computed + s->chunk;
      if (s->computed + s->chunk >= s->target) sp.rows++;
    }
  }
  if (!sp.seqs) {
    if (r->nrun || !r->pinned) return false;
    /* an idle replica whose cached prefixes leave too little for the next request: drop them */
    r->free_blocks += r->pinned;
    r->pinned = 0;
    memset(r->cached, 0, (size_t)(e->groups > 0 ? e->groups : 1));
    return step_replica(e, ri);
  }
  if (!prefill_tokens) sp.tokens = padded(c, sp.tokens);
  double parts[SV_PART_COUNT];
  double dt = e->step(e->ctx, &sp, parts);
  struct sv_engine_stats *st = e->st;
  st->steps++;
  st->busy_s += dt;
  int kind = !prefill_tokens ? SV_STEP_DECODE : sp.decode ? SV_STEP_MIXED : SV_STEP_PREFILL;
  for (int i = 0; i < SV_PART_COUNT; i++) {
    st->parts_s[i] += parts[i];
    st->kind_parts_s[kind][i] += parts[i];
  }
  if (kind == SV_STEP_DECODE) st->decode_s += dt;
  else if (kind == SV_STEP_MIXED) st->mixed_s += dt;
  else st->prefill_s += dt;
  st->prefill_tokens += prefill_tokens;
  st->decode_tokens += sp.decode;
  st->batch_steps += sp.seqs;
  if (r->nrun > st->running_peak) st->running_peak = r->nrun;
  double start = r->t;
  r->t += dt;
  double t = r->t;
  int bin = tl_bin(&st->tl, start);
  st->tl.busy_s[bin] += dt;
  st->tl.running_s[bin] += (double)r->nrun * dt;
  st->tl.waiting_s[bin] += (double)r->wait.n * dt;
  /* tokens out, sequences done */
  int w = 0;
  for (int i = 0; i < r->nrun; i++) {
    struct seq s = r->run[i];
    bool token = false;
    int emitted = 1;
    if (s.chunk) {
      bool decoding = s.computed >= s.target;
      if (decoding && s.chunk > 1) { /* verified drafts: the accepted ones and one more token come out */
        int a = accepted(e, s.req, s.chunk - 1);
        st->draft_tokens += s.chunk - 1;
        st->accepted_tokens += a;
        st->verify_steps += 1;
        emitted = 1 + a;
        s.computed += emitted;
      } else {
        s.computed += s.chunk;
      }
      if (decoding || s.computed >= s.target) token = true;
      if (!decoding) {
        if (e->generated[s.req]) st->recomputed_tokens += s.chunk;
        cache_prefix(e, r, &s);
      }
      if (decoding) s.target = s.computed; /* the context grows with each token */
    }
    if (token) {
      struct sv_req_out *o = &e->out[s.req];
      if (e->generated[s.req] == 0) o->first_s = t;
      else {
        double gap = t - s.last_s;
        sv_gaps_add(st->gaps, gap);
        if (gap > o->max_gap_s) o->max_gap_s = gap;
      }
      s.last_s = t;
      o->finish_s = t;
      st->tl.tokens[bin] += emitted;
      e->generated[s.req] += emitted;
      if (e->generated[s.req] >= e->req[s.req].output) {
        r->free_blocks += s.blocks;
        continue;
      }
    }
    r->run[w++] = s;
  }
  r->nrun = w;
  long used = c->kv_blocks - r->free_blocks;
  st->kv_block_s += (double)used * dt;
  st->tl.kv_s[bin] += (double)used / (double)(c->kv_blocks > 0 ? c->kv_blocks : 1) * dt;
  if (used > st->kv_peak) st->kv_peak = used;
  if (t > st->end_s) st->end_s = t;
  if (e->record) {
    if (st->nrec == st->caprec) {
      st->caprec = st->caprec ? 2 * st->caprec : 1024;
      st->rec = npu_xrealloc(st->rec, st->caprec * sizeof *st->rec);
    }
    st->rec[st->nrec++] = (struct sv_step_rec){start, dt, ri, sp.decode, prefill_tokens, r->nrun, (int)r->wait.n, used};
  }
  return true;
}

/* A binary min-heap of replica indices by (time, index): which replica steps next. */
struct heap {
  int *v; /* replica indices in heap order */
  int n;
  const struct replica *rep;
};

static bool heap_before(const struct heap *h, int a, int b)
{
  double ta = h->rep[a].t, tb = h->rep[b].t;
  return ta < tb || (ta == tb && a < b);
}

static void heap_up(struct heap *h, int i)
{
  int r = h->v[i];
  while (i > 0 && heap_before(h, r, h->v[(i - 1) / 2])) {
    h->v[i] = h->v[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->v[i] = r;
}

static void heap_down(struct heap *h, int i)
{
  int r = h->v[i];
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && heap_before(h, h->v[c + 1], h->v[c])) c++;
    if (!heap_before(h, h->v[c], r)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  h->v[i] = r;
}

static void heap_insert(struct heap *h, int r)
{
  h->v[h->n++] = r;
  heap_up(h, h->n - 1);
}

static void heap_remove_top(struct heap *h)
{
  if (--h->n > 0) {
    h->v[0] = h->v[h->n];
    heap_down(h, 0);
  }
}

void sv_engine_run(const struct sv_engine_cfg *cfg, sv_step_fn step, const void *ctx, struct sv_request *req, int n,
                   struct sv_req_out *out, bool record, struct sv_engine_stats *st)
{
  NPU_ASSERT(cfg->replicas >= 1 && cfg->max_seqs >= 1 && cfg->token_budget >= 1 && cfg->block_tokens >= 1);
  memset(st, 0, sizeof *st);
  memset(out, 0, (size_t)(n > 0 ? n : 0) * sizeof *out);
  st->gaps = npu_xcalloc(1, sizeof *st->gaps);
  struct engine e = {cfg, step, ctx, req, out, NULL, NULL, 0, NULL, st, record};
  e.generated = npu_xcalloc((size_t)(n > 0 ? n : 1), sizeof *e.generated);
  e.rng = npu_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *e.rng);
  for (int i = 0; i < n; i++) e.rng[i] = (uint64_t)cfg->spec_seed * 0x100000001b3ull + (uint64_t)i;
  for (int i = 0; i < n; i++)
    if (req[i].prefix + 1 > e.groups) e.groups = req[i].prefix + 1;
  e.rep = npu_xcalloc((size_t)cfg->replicas, sizeof *e.rep);
  for (int i = 0; i < cfg->replicas; i++) {
    e.rep[i].run = npu_xmalloc((size_t)cfg->max_seqs * sizeof *e.rep[i].run);
    e.rep[i].free_blocks = cfg->kv_blocks;
    e.rep[i].cached = npu_xcalloc((size_t)(e.groups > 0 ? e.groups : 1), 1);
  }
  /* the replicas with work, earliest first (ties: the lowest index) */
  struct heap h = {npu_xmalloc((size_t)cfg->replicas * sizeof(int)), 0, e.rep};
  int next = 0, rr = 0;
  for (;;) {
    double a = next < n ? req[next].arrival_s : INFINITY;
    int r = h.n ? h.v[0] : -1;
    if (r >= 0 && e.rep[r].t < a) {
      bool ok = step_replica(&e, r);
      NPU_ASSERT(ok); /* the caller checked that every request fits alone */
      if (outstanding(&e.rep[r])) heap_down(&h, 0);
      else heap_remove_top(&h);
      continue;
    }
    if (next == n) break;
    int to = route(&e, next, &rr);
    NPU_ASSERT(to >= 0 && to < cfg->replicas);
    req[next].replica = to;
    struct replica *rp = &e.rep[to];
    bool idle = !outstanding(rp);
    if (idle && rp->t < a) rp->t = a;
    st->tl.arrivals[tl_bin(&st->tl, a)] += 1;
    dq_push(&rp->wait, next, false);
    if (idle) heap_insert(&h, to);
    next++;
  }
  free(h.v);
  for (int i = 0; i < cfg->replicas; i++) {
    free(e.rep[i].run);
    free(e.rep[i].wait.v);
    free(e.rep[i].cached);
  }
  free(e.rep);
  free(e.generated);
  free(e.rng);
}

void sv_engine_stats_add(struct sv_engine_stats *a, const struct sv_engine_stats *b)
{
  a->steps += b->steps;
  a->preemptions += b->preemptions;
  a->busy_s += b->busy_s;
  for (int i = 0; i < SV_PART_COUNT; i++) {
    a->parts_s[i] += b->parts_s[i];
    for (int k = 0; k < SV_STEP_KINDS; k++) a->kind_parts_s[k][i] += b->kind_parts_s[k][i];
  }
  a->prefill_s += b->prefill_s;
  a->decode_s += b->decode_s;
  a->mixed_s += b->mixed_s;
  tl_merge(&a->tl, &b->tl);
  a->prefill_tokens += b->prefill_tokens;
  a->decode_tokens += b->decode_tokens;
  a->recomputed_tokens += b->recomputed_tokens;
  a->cached_tokens += b->cached_tokens;
  a->draft_tokens += b->draft_tokens;
  a->accepted_tokens += b->accepted_tokens;
  a->verify_steps += b->verify_steps;
  a->batch_steps += b->batch_steps;
  a->running_peak = b->running_peak > a->running_peak ? b->running_peak : a->running_peak;
  a->end_s = b->end_s > a->end_s ? b->end_s : a->end_s;
  for (int i = 0; i < SV_GAP_BINS; i++) a->gaps->count[i] += b->gaps->count[i];
  a->gaps->n += b->gaps->n;
  a->gaps->sum += b->gaps->sum;
}

void sv_engine_stats_release(struct sv_engine_stats *st)
{
  free(st->gaps);
  free(st->rec);
  memset(st, 0, sizeof *st);
}
