/* sched.c - the algorithm registry and the build of a schedule from a plan; see sched.h. */
#include "interconnect/sched.h"

#include <stdlib.h>

#include "common/err.h"
#include "interconnect/interconnect_int.h"

#define OPBIT(op) (1u << (op))
#define OPS_FLAT (OPBIT(IC_OP_ALLREDUCE) | OPBIT(IC_OP_REDUCESCATTER) | OPBIT(IC_OP_ALLGATHER) | \
                  OPBIT(IC_OP_BROADCAST) | OPBIT(IC_OP_REDUCE))
#define OPS_A2A (OPBIT(IC_OP_ALLTOALL) | OPBIT(IC_OP_ALLTOALLV))

static bool a2a(const struct ic__job *j)
{
  return j->coll->op == IC_OP_ALLTOALL || j->coll->op == IC_OP_ALLTOALLV;
}

static void build_direct(struct ic__b *b, const struct ic__job *j)
{
  if (j->coll->op == IC_OP_SEND) ic__send(b, j->all, j->bytes);
  else ic__sendrecv(b, j->all, j->comm->size, j->bytes);
}

static void build_pairwise(struct ic__b *b, const struct ic__job *j)
{
  ic__a2a_pairwise(b, j->all, j->comm->size, j->sz);
}

static void build_flat(struct ic__b *b, const struct ic__job *j)
{
  if (a2a(j)) ic__a2a_mesh(b, j->all, j->comm->size, j->sz);
  else ic__flat(b, j->coll->op, j->plan->algo, j->all, j->comm->size, j->coll->root, j->bytes,
                j->plan->oneshot);
}

static void build_hier(struct ic__b *b, const struct ic__job *j)
{
  struct ic__layout l;
  ic__layout_init(&l, j->comm, j->topo);
  if (j->plan->algo == IC_ALGO_PIPELINE) ic__pipeline(b, &l, j->coll->op, j->bytes);
  else ic__hier(b, j->plan, &l, j->coll->op, j->coll->root, j->bytes, j->sz);
  ic__layout_release(&l);
}

static void build_nvls(struct ic__b *b, const struct ic__job *j)
{
  ic__ar_nvls(b, j->all, j->comm->size, j->bytes);
}

static const struct ic__algo registry[] = {
    {IC_ALGO_RING, OPS_FLAT, build_flat},
    {IC_ALGO_MESH, OPS_FLAT | OPS_A2A, build_flat},
    {IC_ALGO_RHD, OPS_FLAT, build_flat},
    {IC_ALGO_NHR, OPS_FLAT, build_flat},
    {IC_ALGO_PAIRWISE, OPS_A2A, build_pairwise},
    {IC_ALGO_HIER, OPBIT(IC_OP_ALLREDUCE) | OPBIT(IC_OP_REDUCESCATTER) | OPBIT(IC_OP_ALLGATHER) |
                       OPBIT(IC_OP_BROADCAST) | OPS_A2A, build_hier},
    {IC_ALGO_PIPELINE, OPBIT(IC_OP_ALLREDUCE) | OPBIT(IC_OP_REDUCESCATTER) |
                           OPBIT(IC_OP_ALLGATHER), build_hier},
    {IC_ALGO_DIRECT, OPBIT(IC_OP_SENDRECV) | OPBIT(IC_OP_SEND), build_direct},
    {IC_ALGO_NVLS, OPBIT(IC_OP_ALLREDUCE), build_nvls},
};

const struct ic__algo *ic__algo_get(enum ic_algo a)
{
  for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
    if (registry[i].id == a) return &registry[i];
  return NULL;
}

struct ic_schedule *ic_schedule_build(const struct ic_topo *t, const struct ic_comm *c,
                                      const struct ic_coll *coll, const struct ic_plan *plan,
                                      const struct ic_params *p, double bytes, bool bulk,
                                      double lat_mult)
{
  struct ic__b b;
  ic__b_init(&b, t, c, p, bulk, lat_mult);
  int n = c->size;
  int *all = npu_xmalloc((size_t)n * sizeof *all);
  for (int i = 0; i < n; i++) all[i] = i;
  struct ic__sizes sz = {.matrix = coll->op == IC_OP_ALLTOALLV ? coll->matrix : NULL,
                         .p = n,
                         .scale = coll->bytes > 0 ? bytes / coll->bytes : 0,
                         .uniform = bytes / n};
  struct ic__job j = {t, c, coll, plan, bytes, all, &sz};
  if (n > 1) { /* one rank: nothing to move */
    const struct ic__algo *a = ic__algo_get(plan->algo);
    NPU_ASSERT(a && (a->ops & OPBIT(coll->op)));
    a->build(&b, &j);
  }
  free(all);
  return ic__b_finish(&b);
}

void ic_schedule_destroy(struct ic_schedule *s)
{
  if (!s) return;
  free(s->steps);
  free(s->succ);
  free(s->rank_steps);
  free(s);
}
