/* comm.c - communicators and their server layout; see comm.h and interconnect_int.h. */
#include "interconnect/comm.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "interconnect/interconnect_int.h"

int ic_comm_init(struct ic_comm *c, const int *ranks, int n, const struct ic_topo *t,
                 const char *key, struct npu_diag *diag)
{
  c->size = 0;
  c->ranks = NULL;
  if (n < 1)
    return npu_diag_set(diag, "command line", 0, key, "a communicator needs at least 1 rank"),
           NPU_EINVAL;
  int total = ic_topo_ranks(t);
  char *seen = npu_xcalloc((size_t)total, 1);
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= total) {
      free(seen);
      return npu_diag_set(diag, "command line", 0, key,
                          "rank %d is outside the %d ranks of the platform", ranks[i], total),
             NPU_EINVAL;
    }
    if (seen[ranks[i]]) {
      free(seen);
      return npu_diag_set(diag, "command line", 0, key,
                          "rank %d appears twice in the communicator", ranks[i]),
             NPU_EINVAL;
    }
    seen[ranks[i]] = 1;
  }
  free(seen);
  c->ranks = npu_xmalloc((size_t)n * sizeof *c->ranks);
  memcpy(c->ranks, ranks, (size_t)n * sizeof *c->ranks);
  c->size = n;
  return 0;
}

int ic_comm_init_range(struct ic_comm *c, int first, int n, int stride, const struct ic_topo *t,
                       const char *key, struct npu_diag *diag)
{
  if (n < 1) return ic_comm_init(c, NULL, 0, t, key, diag);
  int *r = npu_xmalloc((size_t)n * sizeof *r);
  for (int i = 0; i < n; i++) r[i] = first + i * stride;
  int rc = ic_comm_init(c, r, n, t, key, diag);
  free(r);
  return rc;
}

void ic_comm_copy(struct ic_comm *c, const struct ic_comm *src)
{
  c->size = src->size;
  c->ranks = npu_xmalloc((size_t)src->size * sizeof *c->ranks);
  memcpy(c->ranks, src->ranks, (size_t)src->size * sizeof *c->ranks);
}

void ic_comm_release(struct ic_comm *c)
{
  free(c->ranks);
  c->ranks = NULL;
  c->size = 0;
}

static int parse_int(const char **p, long *v)
{
  if (!isdigit((unsigned char)**p)) return -1;
  errno = 0;
  char *end;
  *v = strtol(*p, &end, 10);
  if (errno || *v > 1000000000L) return -1;
  *p = end;
  return 0;
}

int ic_comm_parse_list(const char *text, int **out, int *n, const char *key,
                       struct npu_diag *diag)
{
  *out = NULL;
  *n = 0;
  int cap = 0;
  const char *p = text;
  for (;;) {
    long a, b;
    if (parse_int(&p, &a)) goto bad;
    b = a;
    if (*p == '-') {
      p++;
      if (parse_int(&p, &b) || b < a) goto bad;
    }
    for (long v = a; v <= b; v++) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 16;
        *out = npu_xrealloc(*out, (size_t)cap * sizeof **out);
      }
      (*out)[(*n)++] = (int)v;
    }
    if (*p == '\0') return 0;
    if (*p != ',') goto bad;
    p++;
  }
bad:
  free(*out);
  *out = NULL;
  *n = 0;
  return npu_diag_set(diag, "command line", 0, key,
                      "expected a rank list like '0-7,16,24', got '%s'", text), NPU_EINVAL;
}

static int cmp_int2(const void *a, const void *b)
{
  const int *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

void ic__layout_init(struct ic__layout *l, const struct ic_comm *c, const struct ic_topo *t)
{
  int p = c->size;
  int *pairs = npu_xmalloc((size_t)p * 2 * sizeof *pairs); /* (global rank, comm rank) */
  for (int i = 0; i < p; i++) {
    pairs[2 * i] = c->ranks[i];
    pairs[2 * i + 1] = i;
  }
  qsort(pairs, (size_t)p, 2 * sizeof *pairs, cmp_int2);
  l->members = npu_xmalloc((size_t)p * sizeof *l->members);
  l->first = npu_xmalloc((size_t)(p + 1) * sizeof *l->first);
  l->nservers = 0;
  int prev = -1;
  for (int i = 0; i < p; i++) {
    int node = ic_topo_node_of(t, pairs[2 * i]);
    if (node != prev) l->first[l->nservers++] = i;
    prev = node;
    l->members[i] = pairs[2 * i + 1];
  }
  l->first[l->nservers] = p;
  l->per_server = l->first[1] - l->first[0];
  l->uniform = true;
  for (int s = 0; s < l->nservers; s++)
    if (l->first[s + 1] - l->first[s] != l->per_server) l->uniform = false;
  free(pairs);
}

void ic__layout_release(struct ic__layout *l)
{
  free(l->members);
  free(l->first);
  l->members = l->first = NULL;
}

int ic_comm_servers(const struct ic_comm *c, const struct ic_topo *t, bool *uniform)
{
  struct ic__layout l;
  ic__layout_init(&l, c, t);
  int n = l.nservers;
  if (uniform) *uniform = l.uniform;
  ic__layout_release(&l);
  return n;
}
