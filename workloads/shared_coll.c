/*
 * shared_coll.c - the table of collectives several replay ranks take part in (EP all-to-alls,
 * gradient buckets, parameter gathers): created by the first member to join, found by key by
 * the others, freed by the last member done with it. See workloads_int.h.
 */
#include "workloads/workloads_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "engine/engine.h"

#define EPS 1e-12

static uint64_t mix(uint64_t h)
{
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

uint64_t wl__shared_key(int kind, uint64_t a, uint64_t b, uint64_t c)
{
  return (((c * 1000003ull + b) * 1000033ull + a) << 4 | (uint64_t)kind) | 1ull << 63;
}

int wl__shared_find(const struct wl__shared_table *t, uint64_t key)
{
  if (!t->cap_ix) return -1;
  size_t i = mix(key) & (t->cap_ix - 1);
  while (t->ix[i] >= 0) {
    if (t->v[t->ix[i]].key == key) return t->ix[i];
    i = (i + 1) & (t->cap_ix - 1);
  }
  return -1;
}

static void put_index(struct wl__shared_table *t, int h)
{
  size_t i = mix(t->v[h].key) & (t->cap_ix - 1);
  while (t->ix[i] >= 0) i = (i + 1) & (t->cap_ix - 1);
  t->ix[i] = h;
}

int wl__shared_add(struct wl__shared_table *t, uint64_t key)
{
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 1024;
    t->v = npu_xrealloc(t->v, t->cap * sizeof *t->v);
  }
  int h = (int)t->n++;
  memset(&t->v[h], 0, sizeof t->v[h]);
  t->v[h].key = key;
  t->v[h].first = -1;
  t->v[h].then_first = -1;
  t->v[h].formula_s = -1;
  if (2 * t->n > t->cap_ix) { /* grow the index: handles do not move */
    free(t->ix);
    t->cap_ix = t->cap_ix ? 2 * t->cap_ix : 2048;
    t->ix = npu_xmalloc(t->cap_ix * sizeof *t->ix);
    for (size_t k = 0; k < t->cap_ix; k++) t->ix[k] = -1;
    for (size_t k = 0; k < t->n; k++) put_index(t, (int)k);
  } else {
    put_index(t, h);
  }
  return h;
}

/* Whether executor instances first .. first + n - 1 are all done. */
static bool instances_done(struct ic_exec *x, int first, int n)
{
  for (int i = 0; i < n; i++)
    if (!ic_exec_done(x, first + i)) return false;
  return true;
}

bool wl__shared_first_done(const struct wl__shared *s, struct ic_exec *x)
{
  return s->first < 0 || instances_done(x, s->first, s->n);
}

bool wl__shared_done(const struct wl__shared_table *t, int h, struct ic_exec *x)
{
  const struct wl__shared *s = &t->v[h];
  if (s->formula_s >= 0 && s->n == 0 && s->members) /* a formula all-to-all */
    return s->joined >= s->members && npu_engine_clock() + EPS >= s->last_join + s->formula_s;
  if (s->first < 0) return true;
  if (!wl__shared_first_done(s, x)) return false;
  if (!s->then_n) return true;
  return s->then_first >= 0 && instances_done(x, s->then_first, s->then_n); /* not started: not done */
}

double wl__shared_end_s(const struct wl__shared_table *t, int h, const struct ic_exec *x)
{
  const struct wl__shared *s = &t->v[h];
  if (s->formula_s >= 0 && s->n == 0 && s->members) return s->last_join + s->formula_s;
  double end = NAN;
  if (s->then_n && s->first >= 0 && s->then_first < 0) return NAN; /* the second phase is to come */
  int first = s->then_n ? s->then_first : s->first, n = s->then_n ? s->then_n : s->n;
  for (int i = 0; i < n && s->first >= 0; i++) {
    struct ic_result res;
    ic_exec_result(x, first + i, &res);
    if (!(res.end_s <= end)) end = res.end_s; /* NAN-safe max */
  }
  return end;
}

void wl__shared_drop(struct wl__shared_table *t, int h, struct ic_exec *x)
{
  struct wl__shared *s = &t->v[h];
  if (++s->released < s->members) return;
  for (int i = 0; i < s->n && s->first >= 0; i++) ic_exec_release(x, s->first + i);
  for (int i = 0; i < s->then_n && s->first >= 0 && s->then_first >= 0; i++) ic_exec_release(x, s->then_first + i);
  free(s->matrix);
  s->matrix = NULL;
  s->first = -1; /* the entry stays, done, under its key (its handle may still be held) */
}

void wl__shared_release(struct wl__shared_table *t)
{
  for (size_t i = 0; i < t->n; i++) free(t->v[i].matrix);
  free(t->v);
  free(t->ix);
  memset(t, 0, sizeof *t);
}
