/*
 * platform.h - the SimGrid platform of a cluster, generated as XML text from its topology.
 *
 * Hosts (stable names, used by the executor and by whoever replays work on them):
 *   r<rank>        one NPU die; the end of its scale-up traffic (d2d, mesh, switch, pod)
 *   r<rank>.nic    its scale-out endpoint (all its NICs together), when the cluster has a
 *                  scale-out network; r<k>.nic with k >= the generated ranks pads a leaf
 * Links are one-directional (full duplex = one link per direction):
 *   n<n>.p<a>-p<b>       HCCS link from package a to package b of node n (full mesh)
 *   n<n>.p<a>.up / .dn   package a's port into / out of node n's switch (switched node)
 *   n<n>.p<a>.d<i>-d<j>  SIO link from die i to die j of a package
 *   n<n>.up / .dn        node n's uplink into / out of its SuperPoD's second tier
 *   n<n>.p<a>.ub.up/.dn  a full-mesh package's port into the SuperPoD fabric
 *   scaleout_*           NIC, leaf and spine links of the scale-out fat tree (SimGrid's names)
 * Zones, two levels at most (SimGrid 3.32 routes wrongly across three):
 *   npusim (Full, no routes of its own: no flow crosses between its children)
 *   +- g<k>      (Full)          up to 512 dies of whole nodes, explicit die-to-die routes
 *   +- pod<q>    (DijkstraCache) one SuperPoD: dies, node switches n<n>.sw, pod<q>.core
 *   +- scaleout  (cluster FAT_TREE, SPLITDUPLEX) the r<rank>.nic endpoints; SimGrid routes
 *                up/down with its d-mod-k rule; leaves, oversubscription as in topo.h
 * Every link has zero latency: the executor adds each transfer's latency (topo.h) after its
 * bytes arrive. Under CM02 a flow's share is inversely proportional to its route latency, so
 * zero latency everywhere is what makes all flows share max-min fairly whatever their routes.
 */
#ifndef NPUSIM_INTERCONNECT_PLATFORM_H
#define NPUSIM_INTERCONNECT_PLATFORM_H

#include <stddef.h>

#include "common/strutil.h"
#include "interconnect/topo.h"

struct ic_platform_stats {
  size_t hosts;   /* r<rank> and r<rank>.nic, padding included */
  size_t links;   /* declared one-directional links (the fat tree's not counted) */
  size_t routes;  /* explicit routes */
  size_t zones;   /* child zones of the top zone */
};

/* Append the whole platform document of t to out; stats may be NULL. */
void ic_platform_xml(const struct ic_topo *t, struct npu_buf *out, struct ic_platform_stats *stats);

#endif
