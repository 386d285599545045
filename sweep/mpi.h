/*
 * mpi.h - sweeps across machines: `mpirun -n K npusim sweep ...`.
 *
 * Rank 0 hands points out one at a time to ranks that ask (dynamic load balancing), runs
 * points itself too, and alone writes the journal and the CSV. Every rank reads the sweep file
 * (it must be visible to all, as the output directory to rank 0) and runs its points in forked
 * children, -j at a time. Built when CMake finds MPI (NPUSIM_HAVE_MPI); otherwise these are
 * stubs and sw_mpi_launched() is false.
 */
#ifndef NPUSIM_SWEEP_MPI_H
#define NPUSIM_SWEEP_MPI_H

#include <stdbool.h>

#include "common/strutil.h"
#include "sweep/sweep.h"

/* Whether this build has MPI. */
bool sw_mpi_available(void);
/* Whether the process was started by mpirun (Open MPI, MPICH/PMI or PMIx environment). */
bool sw_mpi_launched(void);
/* MPI_Init; rank and size. 0 or NPU_EINTERNAL with diag. */
int sw_mpi_init(int *rank, int *size, struct npu_diag *diag);
void sw_mpi_finalize(void);
/* Make every rank agree on whether setup succeeded (rc of rank 0 wins). */
int sw_mpi_agree(int rc);

/* A message rank 0 received from a worker. */
struct sw_mpi_msg {
  int src;
  bool bye;       /* the worker is done */
  bool want;      /* it wants a point */
  int index;      /* the point of the result, or -1 */
  int status;     /* enum sw_status */
  struct npu_buf row;
};

/* Rank 0: take one message if any is waiting (1), else 0. Release m->row after use. */
int sw_mpi_poll(struct sw_mpi_msg *m);
/* Rank 0: answer a request with a point, or -1 for none left. */
void sw_mpi_reply(int dest, int index);

/* A worker rank: ask for points, run them -j at a time, send back rows, until none are left. */
int sw_mpi_worker(const struct sw_spec *s, const struct sw_exec_options *o);

#endif
