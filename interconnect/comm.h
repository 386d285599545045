/*
 * comm.h - communicators: ordered sets of distinct ranks of a topology (any subset: the TP,
 * DP, PP or EP group of a parallel plan), and their split into servers for hierarchical
 * algorithms.
 */
#ifndef NPUSIM_INTERCONNECT_COMM_H
#define NPUSIM_INTERCONNECT_COMM_H

#include <stdbool.h>

#include "common/diag.h"
#include "interconnect/topo.h"

struct ic_comm {
  int size;   /* members */
  int *ranks; /* global rank of each member (comm rank i -> ranks[i]), owned */
};

/*
 * Make c from n global ranks (copied). Returns 0, or NPU_EINVAL with diag naming key when a
 * rank is out of [0, ic_topo_ranks(t)) or appears twice, or n < 1.
 */
int ic_comm_init(struct ic_comm *c, const int *ranks, int n, const struct ic_topo *t,
                 const char *key, struct npu_diag *diag);

/* Make c from first, first + stride, ... (n members); errors as ic_comm_init. */
int ic_comm_init_range(struct ic_comm *c, int first, int n, int stride, const struct ic_topo *t,
                       const char *key, struct npu_diag *diag);

/* Copy src into c. */
void ic_comm_copy(struct ic_comm *c, const struct ic_comm *src);

void ic_comm_release(struct ic_comm *c);

/*
 * Parse a rank list "0-7,16,24-31" into a new array (*out, owned by the caller, *n entries).
 * Returns 0, or NPU_EINVAL with diag (key) for malformed text or negative ranks. Duplicates are
 * kept (ic_comm_init refuses them).
 */
int ic_comm_parse_list(const char *text, int **out, int *n, const char *key,
                       struct npu_diag *diag);

/* Servers (nodes) the communicator spans, and whether every one holds the same number. */
int ic_comm_servers(const struct ic_comm *c, const struct ic_topo *t, bool *uniform);

#endif
