/*
 * topo.h - where each rank sits in a cluster built from the arch description, which class of
 * link joins two ranks, and the uncontended bandwidth and latency of that class.
 *
 * Ranks are dies: rank r lives on node r / node.devices, package (r % devices) / dies.
 * Link classes, from nearest to farthest:
 *   d2d     two dies of one package, the SIO link (node.d2d)
 *   mesh    two packages of a full-mesh node: their own HCCS link (node.link x efficiency)
 *   switch  two packages of a switched node: each package's port into the node's switch
 *           (node.link.ports x node.link x efficiency), shared by its dies and peers
 *   pod     two nodes of one SuperPoD: the package port, then the node's uplink into the
 *           pod's second switch tier (devices x superpod.bandwidth x efficiency / oversub)
 *   nic     anything farther: the device's NICs (nics x nic_bandwidth x efficiency) on a
 *           fat tree or rail-optimized Clos (cluster.scaleout)
 * Latency of one transfer is the class's: node.d2d.latency, node.link.latency (device to
 * device, switched or not), cluster.superpod.latency, or for nic nic_latency plus
 * switch_latency for each switch hop beyond the leaf (2 across leaves, 4 across fat-tree
 * pods). No model here: these are the arch figures and the formulas above.
 *
 * The scale-out network is a folded Clos of radix-k switches: a leaf has d = floor(k o/(1+o))
 * ports down and k - d up (o = oversubscription), three tiers group k/2 leaves into a pod.
 * Each device's NICs are one endpoint. A fat tree puts endpoints on leaves in rank order; a
 * rail-optimized Clos puts NIC i of d consecutive nodes on one leaf (rail i of a scalable
 * unit). Slots of a partly filled last leaf are padding.
 */
#ifndef NPUSIM_INTERCONNECT_TOPO_H
#define NPUSIM_INTERCONNECT_TOPO_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/diag.h"

enum ic_class {
  IC_CLASS_LOCAL,  /* same rank: a local copy, no link */
  IC_CLASS_D2D,
  IC_CLASS_MESH,
  IC_CLASS_SWITCH,
  IC_CLASS_POD,
  IC_CLASS_NIC,
  IC_CLASS_COUNT
};

struct ic_topo;

/* Devices (ranks) in the whole system described by sys: nodes x node.devices, or 1. */
int ic_topo_system_ranks(const struct arch_system *sys);

/*
 * Build the placement of nranks ranks (the first nranks devices; whole nodes are generated).
 * Returns 0, or NPU_EINVAL with diag (key "ranks") when nranks is below 1 or beyond the system.
 */
int ic_topo_create(struct ic_topo **out, const struct arch_system *sys, int nranks,
                   struct npu_diag *diag);
void ic_topo_destroy(struct ic_topo *t);

/* Ranks asked for; ranks of the generated whole nodes (>= ranks). */
int ic_topo_ranks(const struct ic_topo *t);
int ic_topo_platform_ranks(const struct ic_topo *t);

int ic_topo_devices_per_node(const struct ic_topo *t);
int ic_topo_node_of(const struct ic_topo *t, int rank);
int ic_topo_nodes(const struct ic_topo *t);          /* generated nodes */
bool ic_topo_full_mesh(const struct ic_topo *t);     /* node.topology == full_mesh */
bool ic_topo_has_nic(const struct ic_topo *t);       /* a scale-out network exists */
int ic_topo_pod_nodes(const struct ic_topo *t);      /* nodes per SuperPoD; 0 without */
/* Whether ranks use HCCL's rules (split-core Ascend chips) rather than NCCL-like ring. */
bool ic_topo_hccl(const struct ic_topo *t);

/* Class of the link between ranks a and b. */
enum ic_class ic_topo_class(const struct ic_topo *t, int a, int b);
/* Latency of one transfer from a to b (0 for the same rank). */
double ic_topo_latency_s(const struct ic_topo *t, int a, int b);
/* Bandwidth one flow of the class gets alone (its route's narrowest link). */
double ic_topo_class_bw(const struct ic_topo *t, enum ic_class c);
/*
 * The fraction of the platform's node link capacity (node.link.efficiency) that a transfer of a
 * collective whose transfers are key_bytes each reaches (arch_link_fraction): a transfer of b
 * bytes on a mesh or switch link runs as b / scale bytes. p2p: a send or an all-to-all
 * (node.link.p2p_fraction). 1 for other classes and for nodes with neither; at most 1.
 */
double ic_topo_link_scale(const struct ic_topo *t, enum ic_class c, double key_bytes, bool p2p);
/* Whether the class's first hop is a port shared by all of a rank's peers (switch, pod, nic)
 * rather than a link of its own per peer (d2d, mesh). */
bool ic_class_shared(enum ic_class c);
const char *ic_class_name(enum ic_class c);

/* SimGrid host that sends or receives rank's traffic of class c: "r<rank>" or "r<rank>.nic". */
void ic_topo_host_name(const struct ic_topo *t, int rank, enum ic_class c, char *buf, int n);

/* Scale-out geometry (valid when ic_topo_has_nic). */
struct ic_fat_tree {
  int tiers;          /* levels of the generated tree (1..3) */
  int leaf_down;      /* endpoints per leaf (d) */
  int leaf_up;        /* uplinks per leaf (k - d) */
  int leaves;         /* leaves generated */
  int leaves_per_pod; /* three tiers: leaves per pod */
  int pods;           /* three tiers: pods */
  int agg_up;         /* three tiers: uplinks per aggregation switch (k/2) */
  int slots;          /* endpoints incl. padding = leaves x leaf_down */
};
const struct ic_fat_tree *ic_topo_fat_tree(const struct ic_topo *t);
/* Slot of rank's endpoint in the tree, and the rank in a slot (-1 for padding). */
int ic_topo_slot(const struct ic_topo *t, int rank);
int ic_topo_slot_rank(const struct ic_topo *t, int slot);

/* The arch description the topology was built from (borrowed, lives as long as the caller's). */
const struct arch_system *ic_topo_system(const struct ic_topo *t);

#endif
