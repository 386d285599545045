/*
 * interconnect_int.h - declarations shared by the files of interconnect/ only: the server
 * layout of a communicator, the schedule builder that algorithms emit into, and the algorithm
 * primitives (one file per family).
 */
#ifndef NPUSIM_INTERCONNECT_INTERCONNECT_INT_H
#define NPUSIM_INTERCONNECT_INTERCONNECT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "interconnect/sched.h"

/* Communicator members grouped by server: comm ranks of server s are
 * members[first[s] .. first[s+1]), servers in node order, members in global-rank order. */
struct ic__layout {
  int nservers;
  int per_server; /* members of the first server */
  bool uniform;   /* every server has per_server members */
  int *members;
  int *first;
};
void ic__layout_init(struct ic__layout *l, const struct ic_comm *c, const struct ic_topo *t);
void ic__layout_release(struct ic__layout *l);

/* AllToAll sizes: matrix[i * p + j] x scale, or uniform bytes to every other rank. */
struct ic__sizes {
  const double *matrix; /* NULL: uniform */
  int p;
  double scale;
  double uniform;
};
static inline double ic__size(const struct ic__sizes *s, int i, int j)
{
  return s->matrix ? s->matrix[(int64_t)i * s->p + j] * s->scale : s->uniform;
}

/* Per-rank state of the builder (comm ranks). */
struct ic__brank {
  int64_t last;         /* last synchronisation step of the rank, -1 if none */
  uint32_t *open;       /* step: transfers of the open round */
  int nopen, capopen;
  double reduce;        /* step: bytes to reduce at the end of the open round */
  /* bulk */
  int64_t phase_start;  /* last at the start of the phase */
  unsigned rmask, smask;
  double rload[IC_CLASS_COUNT], rlat[IC_CLASS_COUNT], rbig[IC_CLASS_COUNT];
  int rpeer[IC_CLASS_COUNT];
  double sload[IC_CLASS_COUNT], spre[IC_CLASS_COUNT], spost[IC_CLASS_COUNT];
  double sbig[IC_CLASS_COUNT]; /* largest single transfer merged so far, its peer in speer */
  int speer[IC_CLASS_COUNT];
  double preduce;       /* bytes to reduce at the end of the phase */
  uint32_t *in;         /* transfers into the rank in this phase */
  int nin, capin;
  bool active;
};

struct ic__edge { uint32_t from, to; };

struct ic__b {
  struct ic_schedule *s;
  size_t capsteps;
  struct ic__edge *edges;
  size_t nedges, capedges;
  const struct ic_topo *topo;
  const int *g;              /* comm rank -> global rank */
  double overhead_s;         /* task overhead x lat_mult */
  double lat_mult;
  double gamma;              /* seconds per reduced byte */
  bool bulk;
  bool rep_first;            /* bulk: a segment's peer is its first step's, not its largest's */
  struct ic__brank *r;
  int *active;               /* bulk: ranks touched in the phase */
  int nactive;
};

void ic__b_init(struct ic__b *b, const struct ic_topo *t, const struct ic_comm *c,
                const struct ic_params *p, bool bulk, double lat_mult);
/* A transfer of bytes from src to dst in their current step. */
void ic__b_send(struct ic__b *b, int src, int dst, double bytes);
/* bytes that rank reduces at the end of its current step. */
void ic__b_reduce(struct ic__b *b, int rank, double bytes);
/* Close the current step of each of the k ranks in m. */
void ic__b_end_step(struct ic__b *b, const int *m, int k);
/*
 * Bulk: send each merged transfer to the peer of the segment's first step (every step a
 * permutation, as in pairwise AllToAll, keeps the merged transfers a permutation even when
 * sizes are uneven) rather than to the peer of its largest step (the default).
 */
void ic__b_rep_first(struct ic__b *b, bool on);
/* Close a phase (bulk: emit the merged transfers and the phase's reductions). */
void ic__b_end_phase(struct ic__b *b);
/* Finish: successor lists, dependency and per-rank counts. Returns the schedule. */
struct ic_schedule *ic__b_finish(struct ic__b *b);

/* Primitives on k members m (comm ranks); n is S of the primitive (see coll.h). */
void ic__rs_ring(struct ic__b *b, const int *m, int k, double n);
void ic__ag_ring(struct ic__b *b, const int *m, int k, double n);
void ic__rs_mesh(struct ic__b *b, const int *m, int k, double n);
void ic__ag_mesh(struct ic__b *b, const int *m, int k, double n);
void ic__ar_oneshot(struct ic__b *b, const int *m, int k, double n);
void ic__bcast_star(struct ic__b *b, const int *m, int k, int root, double n);
void ic__reduce_star(struct ic__b *b, const int *m, int k, int root, double n);
void ic__scatter_star(struct ic__b *b, const int *m, int k, int root, double n);
void ic__a2a_mesh(struct ic__b *b, const int *m, int k, const struct ic__sizes *sz);
void ic__a2a_pairwise(struct ic__b *b, const int *m, int k, const struct ic__sizes *sz);
void ic__rs_rhd(struct ic__b *b, const int *m, int k, double n);
void ic__ag_rhd(struct ic__b *b, const int *m, int k, double n);
void ic__ar_rhd(struct ic__b *b, const int *m, int k, double n);
void ic__rs_nhr(struct ic__b *b, const int *m, int k, double n);
void ic__ag_nhr(struct ic__b *b, const int *m, int k, double n);
void ic__scatter_binomial(struct ic__b *b, const int *m, int k, int root, double n);
void ic__gather_binomial(struct ic__b *b, const int *m, int k, int root, double n);
void ic__sendrecv(struct ic__b *b, const int *m, int k, double n);
void ic__ar_nvls(struct ic__b *b, const int *m, int k, double n);
void ic__send(struct ic__b *b, const int *m, double n);

/* One collective to emit: what the algorithms' entry points receive. */
struct ic__job {
  const struct ic_topo *topo;
  const struct ic_comm *comm;
  const struct ic_coll *coll;
  const struct ic_plan *plan;
  double bytes;                /* S of this pass */
  const int *all;              /* 0 .. p-1 */
  const struct ic__sizes *sz;  /* AllToAll(V) sizes */
};

/* The algorithm registry: name, ops implemented, entry point (sched.c). */
struct ic__algo {
  enum ic_algo id;
  unsigned ops;                /* bit (1 << enum ic_op) per op implemented */
  void (*build)(struct ic__b *b, const struct ic__job *j);
};
/* The registry entry of a (never NULL for a valid algorithm other than auto). */
const struct ic__algo *ic__algo_get(enum ic_algo a);

/* The flat algorithm a (ring, mesh, rhd, nhr) for op on members m; root is a member index. */
void ic__flat(struct ic__b *b, enum ic_op op, enum ic_algo a, const int *m, int k, int root,
              double n, bool oneshot);
/* Hierarchical and pipeline algorithms over the communicator's servers. */
void ic__hier(struct ic__b *b, const struct ic_plan *plan, const struct ic__layout *l,
              enum ic_op op, int root, double n, const struct ic__sizes *sz);
void ic__pipeline(struct ic__b *b, const struct ic__layout *l, enum ic_op op, double n);

#endif
