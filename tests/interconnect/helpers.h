/* helpers.h - shared setup for the interconnect tests: a loaded system, a sim, one-shot runs. */
#ifndef NPUSIM_TESTS_INTERCONNECT_HELPERS_H
#define NPUSIM_TESTS_INTERCONNECT_HELPERS_H

#include "interconnect/run.h"

struct th {
  struct arch_system sys;
  struct ic_params prm;
  struct ic_sim *sim;
};

/* Load preset with overrides (NULL-terminated list, may be NULL) and make a sim of nranks. */
void th_init(struct th *h, const char *preset, const char *const *sets, int nranks);
void th_fini(struct th *h);

/* A communicator of ranks first, first + stride, ... (n members). */
void th_comm(struct th *h, struct ic_comm *c, int first, int n, int stride);

/* A collective with the given op, algorithm, fidelity and S. */
struct ic_coll th_coll(enum ic_op op, enum ic_algo algo, enum ic_fidelity f, double bytes);

/* Run one collective alone; returns its time and fills res (may be NULL). */
double th_run(struct th *h, const struct ic_comm *c, struct ic_coll coll, struct ic_result *res);

/* Assert |got - want| <= rel * want with a message naming what. */
void th_close(double got, double want, double rel, const char *what);

#endif
