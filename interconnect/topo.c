/* topo.c - rank placement, link classes and their bandwidth/latency; see topo.h. */
#include "interconnect/topo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"

struct ic_topo {
  const struct arch_system *sys;
  int nranks, platform_ranks;
  int devices, dies, nodes;
  bool mesh;                 /* full-mesh node */
  bool hccl;
  int pod_nodes;             /* 0: no SuperPoD */
  bool has_nic;
  bool rails;
  double bw[IC_CLASS_COUNT];
  double lat_d2d, lat_node, lat_pod, lat_nic, lat_switch;
  struct ic_fat_tree ft;
  int *slot_of;              /* rank -> slot */
  int *rank_of;              /* slot -> rank or -1 */
};

int ic_topo_system_ranks(const struct arch_system *sys)
{
  if (!sys->has_node) return 1;
  int nodes = sys->has_cluster ? sys->cluster.nodes : 1;
  return nodes * sys->node.devices;
}

static void build_tree(struct ic_topo *t)
{
  const struct arch_cluster *c = &t->sys->cluster;
  struct ic_fat_tree *f = &t->ft;
  int k = c->scaleout.switch_radix;
  double o = c->scaleout.oversubscription;
  int endpoints = t->platform_ranks;
  int d = (int)floor(k * o / (1 + o) + 1e-9);
  if (d < 1) d = 1;
  if (d > k - 1 && k > 1) d = k - 1;
  f->leaf_down = d;
  f->leaf_up = k > d ? k - d : 1;
  f->agg_up = k / 2 > 0 ? k / 2 : 1;
  int rails = t->devices;
  int units = (t->nodes + d - 1) / d; /* rail-optimized: scalable units of d nodes */
  int leaves = t->rails ? units * rails : (endpoints + d - 1) / d;
  if (c->scaleout.tiers == 1 || leaves == 1) {
    f->tiers = 1; /* one switch holds every endpoint */
    f->leaves = 1;
    f->leaf_down = endpoints;
    f->leaves_per_pod = 1;
    f->pods = 1;
  } else if (c->scaleout.tiers == 2 || leaves <= (k / 2 > 0 ? k / 2 : 1)) {
    f->tiers = 2;
    f->leaves = leaves;
    f->leaves_per_pod = leaves;
    f->pods = 1;
  } else {
    f->tiers = 3;
    int per = k / 2 > 0 ? k / 2 : 1;
    f->pods = (leaves + per - 1) / per;
    f->leaves_per_pod = per;
    f->leaves = per * f->pods;
  }
  f->slots = f->leaves * f->leaf_down;
  t->slot_of = npu_xmalloc((size_t)t->platform_ranks * sizeof *t->slot_of);
  t->rank_of = npu_xmalloc((size_t)f->slots * sizeof *t->rank_of);
  for (int s = 0; s < f->slots; s++) t->rank_of[s] = -1;
  for (int r = 0; r < t->platform_ranks; r++) {
    int slot = r, node = r / t->devices, rail = r % t->devices;
    if (t->rails && f->tiers > 1)
      slot = ((node / d) * rails + rail) * d + node % d; /* leaf = (unit, rail) */
    else if (t->rails)
      slot = rail * t->nodes + node;
    NPU_ASSERT(slot < f->slots);
    t->slot_of[r] = slot;
    t->rank_of[slot] = r;
  }
}

int ic_topo_create(struct ic_topo **out, const struct arch_system *sys, int nranks,
                   struct npu_diag *diag)
{
  *out = NULL;
  int total = ic_topo_system_ranks(sys);
  if (nranks < 1)
    return npu_diag_set(diag, "command line", 0, "ranks", "expected at least 1 rank, got %d",
                        nranks), NPU_EINVAL;
  if (nranks > total) {
    if (sys->has_node)
      return npu_diag_set(diag, "command line", 0, "ranks",
                          "%d ranks exceed the %d devices of the system (%d node%s x %d)",
                          nranks, total, total / sys->node.devices,
                          total / sys->node.devices == 1 ? "" : "s", sys->node.devices),
             NPU_EINVAL;
    return npu_diag_set(diag, "command line", 0, "ranks",
                        "%d ranks exceed the single device of chip '%s' (no node section)",
                        nranks, sys->chip.name), NPU_EINVAL;
  }
  struct ic_topo *t = npu_xcalloc(1, sizeof *t);
  t->sys = sys;
  t->nranks = nranks;
  t->hccl = sys->chip.org == ARCH_ORG_SPLIT;
  t->devices = sys->has_node ? sys->node.devices : 1;
  t->dies = sys->has_node ? sys->node.dies_per_package : 1;
  t->nodes = (nranks + t->devices - 1) / t->devices;
  t->platform_ranks = t->nodes * t->devices;
  t->bw[IC_CLASS_LOCAL] = INFINITY;
  if (sys->has_node) {
    const struct arch_node *n = &sys->node;
    double eff = n->link_efficiency.value;
    t->mesh = n->topology == ARCH_NODE_FULL_MESH;
    t->bw[IC_CLASS_D2D] = n->d2d.bw_bytes_per_s;
    t->bw[IC_CLASS_MESH] = n->link.bw_bytes_per_s * eff;
    t->bw[IC_CLASS_SWITCH] = n->link.ports * n->link.bw_bytes_per_s * eff;
    t->lat_d2d = n->d2d.latency_s;
    t->lat_node = n->link.latency_s;
  }
  if (sys->has_cluster) {
    const struct arch_cluster *c = &sys->cluster;
    if (c->superpod.nodes > 0) {
      t->pod_nodes = c->superpod.nodes;
      double die = c->superpod.bw_bytes_per_s * c->superpod.efficiency.value;
      double up = t->devices * die / c->superpod.oversubscription;
      double port = t->mesh ? t->dies * die : t->bw[IC_CLASS_SWITCH];
      t->bw[IC_CLASS_POD] = fmin(port, up);
      t->lat_pod = c->superpod.latency_s;
    }
    if (c->scaleout.topology != ARCH_SCALEOUT_NONE) {
      t->has_nic = true;
      t->rails = c->scaleout.topology == ARCH_SCALEOUT_RAIL_CLOS;
      t->bw[IC_CLASS_NIC] = c->scaleout.nics_per_device * c->scaleout.nic_bw_bytes_per_s *
                            c->scaleout.efficiency.value;
      t->lat_nic = c->scaleout.nic_latency_s;
      t->lat_switch = c->scaleout.switch_latency_s;
      build_tree(t);
    }
  }
  *out = t;
  return 0;
}

void ic_topo_destroy(struct ic_topo *t)
{
  if (!t) return;
  free(t->slot_of);
  free(t->rank_of);
  free(t);
}

int ic_topo_ranks(const struct ic_topo *t) { return t->nranks; }
int ic_topo_platform_ranks(const struct ic_topo *t) { return t->platform_ranks; }
int ic_topo_devices_per_node(const struct ic_topo *t) { return t->devices; }
int ic_topo_node_of(const struct ic_topo *t, int rank) { return rank / t->devices; }
int ic_topo_nodes(const struct ic_topo *t) { return t->nodes; }
bool ic_topo_full_mesh(const struct ic_topo *t) { return t->mesh; }
bool ic_topo_has_nic(const struct ic_topo *t) { return t->has_nic; }
int ic_topo_pod_nodes(const struct ic_topo *t) { return t->pod_nodes; }
bool ic_topo_hccl(const struct ic_topo *t) { return t->hccl; }
const struct arch_system *ic_topo_system(const struct ic_topo *t) { return t->sys; }
const struct ic_fat_tree *ic_topo_fat_tree(const struct ic_topo *t) { return &t->ft; }
int ic_topo_slot(const struct ic_topo *t, int rank) { return t->slot_of[rank]; }
int ic_topo_slot_rank(const struct ic_topo *t, int slot) { return t->rank_of[slot]; }

enum ic_class ic_topo_class(const struct ic_topo *t, int a, int b)
{
  if (a == b) return IC_CLASS_LOCAL;
  int na = a / t->devices, nb = b / t->devices;
  if (na == nb) {
    if ((a % t->devices) / t->dies == (b % t->devices) / t->dies) return IC_CLASS_D2D;
    return t->mesh ? IC_CLASS_MESH : IC_CLASS_SWITCH;
  }
  if (t->pod_nodes > 0 && na / t->pod_nodes == nb / t->pod_nodes) return IC_CLASS_POD;
  NPU_ASSERT(t->has_nic);
  return IC_CLASS_NIC;
}

double ic_topo_latency_s(const struct ic_topo *t, int a, int b)
{
  switch (ic_topo_class(t, a, b)) {
  case IC_CLASS_LOCAL: return 0;
  case IC_CLASS_D2D: return t->lat_d2d;
  case IC_CLASS_MESH:
  case IC_CLASS_SWITCH: return t->lat_node;
  case IC_CLASS_POD: return t->lat_pod;
  default: break;
  }
  int sa = t->slot_of[a], sb = t->slot_of[b];
  int la = sa / t->ft.leaf_down, lb = sb / t->ft.leaf_down;
  if (la == lb) return t->lat_nic;
  if (t->ft.tiers < 3 || la / t->ft.leaves_per_pod == lb / t->ft.leaves_per_pod)
    return t->lat_nic + 2 * t->lat_switch;
  return t->lat_nic + 4 * t->lat_switch;
}

double ic_topo_link_scale(const struct ic_topo *t, enum ic_class c, double key_bytes, bool p2p)
{
  if ((c != IC_CLASS_MESH && c != IC_CLASS_SWITCH) || !t->sys->has_node) return 1;
  return arch_link_fraction(&t->sys->node, key_bytes, p2p);
}

double ic_topo_class_bw(const struct ic_topo *t, enum ic_class c)
{
  return t->bw[c];
}

bool ic_class_shared(enum ic_class c)
{
  return c == IC_CLASS_SWITCH || c == IC_CLASS_POD || c == IC_CLASS_NIC;
}

const char *ic_class_name(enum ic_class c)
{
  static const char *const names[IC_CLASS_COUNT] = {"local", "d2d", "mesh", "switch", "pod", "nic"};
  return (unsigned)c < IC_CLASS_COUNT ? names[c] : "?";
}

void ic_topo_host_name(const struct ic_topo *t, int rank, enum ic_class c, char *buf, int n)
{
  (void)t;
  snprintf(buf, (size_t)n, c == IC_CLASS_NIC ? "r%d.nic" : "r%d", rank);
}
