/*
 * platform.h - the chip's memory system as a SimGrid platform: the hosts and links through
 * which GM traffic of all cores shares L2 and HBM bandwidth.
 *
 *   host  <p>hbm, <p>l2        sources/sinks of GM traffic (HBM miss, L2 hit)
 *   host  <p>dsm                on a chip with multicast (chip.dma.multicast > 1): the cluster
 *                                network that delivers a multicast read's other members' share
 *   host  <p>c<i>               physical core i (cube cores first, then vector cores): where
 *                                its MTE2 reads land
 *   host  <p>c<i>.mte3 / .fix   where its MTE3 / FixPipe writes leave (if the core has them)
 *   link  <p>c<i>.rd            the core's read side: min(GM read port, MTE2 rate)
 *   link  <p>c<i>.wr            the core's GM write port, shared by its write engines
 *   link  <p>c<i>.mte3 / .fix   the write engine's own rate (UB->GM, L0C->GM)
 *   link  <p>l2                 aggregate L2 bandwidth x calib.l2, shared by reads and writes
 *   link  <p>hbm                aggregate HBM bandwidth x calib.hbm, shared by reads and writes
 *   link  <p>pad                a fat pipe that evens route lengths
 * Routes (four links each, so every flow has the same latency and CM02 shares bandwidth
 * max-min fairly): hbm -> c<i>: hbm, l2, c<i>.rd, pad; l2 -> c<i>: pad, l2, c<i>.rd, pad;
 * c<i>.<e> -> hbm: c<i>.<e>, c<i>.wr, l2, hbm; c<i>.<e> -> l2: c<i>.<e>, c<i>.wr, l2, pad;
 * dsm -> c<i>: pad, pad, c<i>.rd, pad (the member's port, not L2).
 * (SimGrid 3.32 ignores a rate set on a host-to-host comm, so engine rates are links.) Every
 * link has a tiny latency (MEM_PLATFORM_LINK_LATENCY_S); the real L2/HBM latencies are added by
 * the executor when data becomes ready, so that a DMA engine pipelines them as hardware does.
 */
#ifndef NPUSIM_MEMORY_PLATFORM_H
#define NPUSIM_MEMORY_PLATFORM_H

#include "arch/arch.h"
#include <stdbool.h>

#include "common/strutil.h"

#define MEM_PLATFORM_LINK_LATENCY_S 1e-10
#define MEM_PLATFORM_ROUTE_LATENCY_S (4 * MEM_PLATFORM_LINK_LATENCY_S)

/* Physical cores of the chip: cube cores, then vector cores (coupled: aic_count). */
int mem_platform_cores(const struct arch_chip *chip);

/* Whether physical core i reads GM (MTE2), writes it from UB (MTE3), from L0C (FixPipe). */
bool mem_platform_core_has(const struct arch_chip *chip, int i, enum arch_path write_path);

/* The rates of core i's own links (bytes/s): its read side (c<i>.rd: the fastest MTE2 read path
 * of the core, at most the GM read port), its GM write port (c<i>.wr) and a write engine's own
 * link (c<i>.mte3 for UB->GM, c<i>.fix for L0C->GM). The analytic fidelity's lockstep model
 * shares the same links (cores/analytic.c). */
double mem_platform_core_read_bytes_per_s(const struct arch_chip *chip, int i);
double mem_platform_core_write_bytes_per_s(const struct arch_chip *chip);
double mem_platform_engine_bytes_per_s(const struct arch_chip *chip, enum arch_path write_path);

/* Append the chip's hosts, links and routes (no <platform>/<zone> around them). */
void mem_platform_chip_elements(const struct arch_chip *chip, const char *prefix,
                                struct npu_buf *out);

/* A whole platform document holding one chip's memory system, host names prefixed by prefix. */
void mem_platform_chip_xml(const struct arch_chip *chip, const char *prefix, struct npu_buf *out);

/*
 * A server of `ranks` such chips joined by a full mesh of links, for launches over several
 * devices (core_launch_opts.ranks): each chip's elements prefixed "d<r>.", a link "x<a>.<b>" per
 * ordered pair (bandwidth link_bytes_per_s one way; the link's latency is the executor's, added when
 * the data land, as for L2 and HBM: core_launch_opts.link_latency_s), and routes for the
 * copies that cross one: d<a>.hbm -> d<b>.c<i>: x<a>.<b>, d<b>.c<i>.rd, d<b>.pad (a core reading
 * another device's memory); d<b>.c<i>.<e> -> d<a>.hbm: d<b>.c<i>.<e>, d<b>.c<i>.wr, x<b>.<a> (a
 * core writing into it). A remote access is charged to the link and to the accessing core's ports,
 * not to any link of the other device: a link carries a few percent of what HBM does; routes that
 * also crossed the other device's HBM link crashed SimGrid 3.32's max-min solver (an out-of-bounds
 * read in lmm::MaxMin::do_solve from 4 devices up); and a link of the other device would join
 * every device's flows into one system that each flow's end re-solves (a 4-turn reduce-scatter
 * on 8 devices took 62 s to simulate instead of 6 s).
 */
void mem_platform_group_xml(const struct arch_chip *chip, int ranks, double link_bytes_per_s,
                            struct npu_buf *out);

#endif
