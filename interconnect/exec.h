/*
 * exec.h - the non-blocking executor of collective schedules, driven by one actor.
 *
 * An executor holds any number of collective instances (each a schedule on a communicator,
 * repeated once per buffer loop) and advances them together: their transfers are flows on the
 * platform (interconnect/platform.h), sharing links with each other and with anything else the
 * driving actor has in flight. Nothing blocks: the owner of the actor loop asks for the flows
 * in flight and the next timed event, waits on them together with its own work (as
 * cores/event.c does for GM traffic), and reports back what completed:
 *
 *   id = ic_exec_start(x, comm, coll, diag);      plan + schedule, nothing runs yet
 *   ic_exec_join(x, id, rank, t);                 rank joins at t (its steps cannot start before)
 *   for (;;) {
 *     ic_exec_advance(x, now);                    due joins, delays, latencies; start ready flows
 *     if (!ic_exec_pending(x)) break;
 *     n = ic_exec_xfers(x, &xs);                  flows in flight (valid until the next call)
 *     k = npu_xfer_wait_any(xs, n, ic_exec_next_event_s(x) - now);
 *     if (k >= 0) ic_exec_xfer_done(x, k, now);
 *     ic_exec_reap(x, now);                       every other flow that ended at the same time
 *   }
 *   ic_exec_rank_end_s(x, id, rank) ...
 *
 * Timing: a step starts when its dependencies are done and both its ranks have joined the
 * loop; a transfer then waits its task overhead, moves its bytes as a flow, and completes its
 * route latency later (topo.h); a delay (reduction) runs after the previous delay of its rank
 * in the same instance. A rank joins loop l+1 when it has finished all its steps of loop l.
 * Bulk instances run one folded loop (sched.h).
 */
#ifndef NPUSIM_INTERCONNECT_EXEC_H
#define NPUSIM_INTERCONNECT_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "common/diag.h"
#include "engine/engine.h"
#include "interconnect/sched.h"

struct ic_exec;

struct ic_result {
  struct ic_plan plan;         /* algorithm and loops */
  enum ic_fidelity fidelity;
  double start_s;              /* earliest join */
  double end_s;                /* latest rank end (NAN while running) */
  double time_s;               /* end_s - start_s */
  size_t steps;                /* schedule steps, all loops */
  size_t flows;                /* flows started */
};

/* An executor for platform t (loaded into the engine with ic_platform_xml). Borrows t and p. */
struct ic_exec *ic_exec_create(const struct ic_topo *t, const struct ic_params *p);
void ic_exec_destroy(struct ic_exec *x);

/*
 * Add an instance of coll on communicator c (copied; coll->matrix is borrowed). Plans it
 * (select.h) and builds its schedules. Returns its id (>= 0), or a negative npu_err with diag
 * for bad input. No rank has joined yet.
 */
int ic_exec_start(struct ic_exec *x, const struct ic_comm *c, const struct ic_coll *coll,
                  struct npu_diag *diag);

/* Rank (a comm rank of instance id) joins at t_s (>= the time of the next advance). */
void ic_exec_join(struct ic_exec *x, int id, int rank, double t_s);
/* Every rank of instance id joins at t_s. */
void ic_exec_join_all(struct ic_exec *x, int id, double t_s);

/* From the driving actor: handle everything due at now_s and start the flows that are ready. */
void ic_exec_advance(struct ic_exec *x, double now_s);

/* Flows in flight; the array is owned by x and valid until the next call on x. */
size_t ic_exec_xfers(const struct ic_exec *x, struct npu_xfer *const **out);

/* Flow i of that array completed at now_s (call ic_exec_advance next). */
void ic_exec_xfer_done(struct ic_exec *x, size_t i, double now_s);

/* Mark every flow with nothing left to move as completed at now_s; returns how many. */
size_t ic_exec_reap(struct ic_exec *x, double now_s);

/* Time of the next timed event (join, delay end, latency end); INFINITY if none. */
double ic_exec_next_event_s(const struct ic_exec *x);

/* Whether flows or timed events remain (instances waiting for joins do not count). */
bool ic_exec_pending(const struct ic_exec *x);

/* Whether every rank of instance id has finished all its loops. */
bool ic_exec_done(const struct ic_exec *x, int id);

/* When comm rank `rank` of instance id finished (NAN if it has not). */
double ic_exec_rank_end_s(const struct ic_exec *x, int id, int rank);

/* Plan, times and counts of instance id. */
void ic_exec_result(const struct ic_exec *x, int id, struct ic_result *out);

/* Free the schedules and state of instance id (its result stays readable). */
void ic_exec_release(struct ic_exec *x, int id);

/* Blocking: from an actor, advance until nothing is pending. */
void ic_exec_run(struct ic_exec *x);

#endif
