/*
 * engine.h - the process's one SimGrid engine, wrapped in one place.
 *
 * SimGrid allows one engine per process for the life of the process (shared/design decision
 * 1): this module owns it. It starts SimGrid with the settings that make link timings exact
 * (CM02 network model, no cross-traffic, no TCP window cap, no weight-S: a transfer of S bytes
 * over a link of bandwidth B and latency L takes S/B + L, and flows of equal route latency share
 * bandwidth max-min fairly), loads a platform generated as XML text, and
 * gives the rest of npusim actors, sleeps and host-to-host transfers.
 *
 * Transfers (npu_xfer) are direct host-to-host flows started by any actor, as SimGrid's C++
 * Comm::sendto_async allows and its C API does not: engine/sg_glue.cpp is the small C++
 * bridge (see docs/ARCHITECTURE.md). Concurrent flows share link bandwidth by SimGrid's
 * max-min model.
 */
#ifndef NPUSIM_ENGINE_ENGINE_H
#define NPUSIM_ENGINE_ENGINE_H

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/diag.h"

/*
 * Start the engine on a platform given as XML text. Call once per process; a second call is a
 * bug and aborts. Returns 0, or NPU_EIO if the temporary platform file cannot be written.
 */
int npu_engine_init(const char *platform_xml, struct npu_diag *diag);

/* Whether npu_engine_init has run in this process. */
bool npu_engine_started(void);

/* A host of the platform by name; NULL if there is none. Owned by SimGrid. */
sg_host_t npu_engine_host(const char *name);

/* Start an actor on host running fn(arg) when the simulation runs. */
void npu_engine_spawn(const char *name, sg_host_t host, void (*fn)(void *arg), void *arg);

/* Run the simulation until no actor is left. */
void npu_engine_run(void);

/* Simulated time in seconds. */
double npu_engine_clock(void);

/* From an actor: let simulated time pass. */
void npu_engine_sleep(double seconds);

/* A transfer of bytes from one host to another, started now, on the route between them. */
struct npu_xfer;

/*
 * Start a transfer from an actor; rate > 0 caps its bandwidth (bytes/s) on top of the links'
 * sharing, as a DMA engine's own rate does. The handle is released with npu_xfer_release.
 */
struct npu_xfer *npu_xfer_start(sg_host_t from, sg_host_t to, double bytes, double rate);

/*
 * From an actor: wait until one of the n transfers completes (returns its index) or timeout
 * seconds pass (returns -1; a negative timeout waits without limit). Completed transfers must
 * be released and removed from the array before the next call.
 */
ssize_t npu_xfer_wait_any(struct npu_xfer *const *xfers, size_t n, double timeout_s);

void npu_xfer_release(struct npu_xfer *x);

/* Bytes not yet transferred (0 when done). */
double npu_xfer_remaining(const struct npu_xfer *x);

#endif
