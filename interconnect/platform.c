/* platform.c - SimGrid platform XML of a cluster topology; see platform.h. */
#include "interconnect/platform.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/units.h"

#define GROUP_HOSTS 512 /* dies per Full zone: its routing table is hosts^2 pointers */

struct gen {
  const struct ic_topo *t;
  const struct arch_system *sys;
  struct npu_buf *o;
  struct ic_platform_stats st;
  int devices, dies, packages;
};

static void link(struct gen *g, const char *id, double bw)
{
  char num[64];
  npu_fmt_double(bw, num, sizeof num);
  npu_buf_printf(g->o, "    <link id=\"%s\" bandwidth=\"%sBps\" latency=\"0s\"/>\n", id, num);
  g->st.links++;
}

static void route(struct gen *g, const char *src, const char *dst, const char *l1, const char *l2)
{
  npu_buf_printf(g->o, "    <route src=\"%s\" dst=\"%s\" symmetrical=\"NO\"><link_ctn id=\"%s\"/>",
                 src, dst, l1);
  if (l2) npu_buf_printf(g->o, "<link_ctn id=\"%s\"/>", l2);
  npu_buf_puts(g->o, "</route>\n");
  g->st.routes++;
}

static void hosts(struct gen *g, int node)
{
  for (int i = 0; i < g->devices; i++)
    npu_buf_printf(g->o, "    <host id=\"r%d\" speed=\"1f\"/>\n", node * g->devices + i);
  g->st.hosts += (size_t)g->devices;
}

/* The links inside node n: SIO, and HCCS mesh links or switch ports. */
static void node_links(struct gen *g, int n)
{
  const struct arch_node *nd = &g->sys->node;
  char id[96];
  for (int a = 0; a < g->packages && g->dies > 1; a++)
    for (int i = 0; i < g->dies; i++)
      for (int j = 0; j < g->dies; j++) {
        if (i == j) continue;
        snprintf(id, sizeof id, "n%d.p%d.d%d-d%d", n, a, i, j);
        link(g, id, nd->d2d.bw_bytes_per_s);
      }
  if (g->packages < 2) return;
  if (ic_topo_full_mesh(g->t)) {
    for (int a = 0; a < g->packages; a++)
      for (int b = 0; b < g->packages; b++) {
        if (a == b) continue;
        snprintf(id, sizeof id, "n%d.p%d-p%d", n, a, b);
        link(g, id, ic_topo_class_bw(g->t, IC_CLASS_MESH));
      }
  } else {
    for (int a = 0; a < g->packages; a++) {
      snprintf(id, sizeof id, "n%d.p%d.up", n, a);
      link(g, id, ic_topo_class_bw(g->t, IC_CLASS_SWITCH));
      snprintf(id, sizeof id, "n%d.p%d.dn", n, a);
      link(g, id, ic_topo_class_bw(g->t, IC_CLASS_SWITCH));
    }
  }
}

/* Route between dies i and j of node n (i != j), as one or two links. */
static void die_route(struct gen *g, int n, int i, int j)
{
  char src[32], dst[32], l1[96], l2[96];
  snprintf(src, sizeof src, "r%d", n * g->devices + i);
  snprintf(dst, sizeof dst, "r%d", n * g->devices + j);
  int a = i / g->dies, b = j / g->dies;
  if (a == b) {
    snprintf(l1, sizeof l1, "n%d.p%d.d%d-d%d", n, a, i % g->dies, j % g->dies);
    route(g, src, dst, l1, NULL);
  } else if (ic_topo_full_mesh(g->t)) {
    snprintf(l1, sizeof l1, "n%d.p%d-p%d", n, a, b);
    route(g, src, dst, l1, NULL);
  } else {
    snprintf(l1, sizeof l1, "n%d.p%d.up", n, a);
    snprintf(l2, sizeof l2, "n%d.p%d.dn", n, b);
    route(g, src, dst, l1, l2);
  }
}

/* Whole nodes [first, last) in one Full zone with every die-to-die route. */
static void group_zone(struct gen *g, int zone, int first, int last)
{
  npu_buf_printf(g->o, "  <zone id=\"g%d\" routing=\"Full\">\n", zone);
  for (int n = first; n < last; n++) hosts(g, n);
  for (int n = first; n < last; n++) node_links(g, n);
  for (int n = first; n < last; n++)
    for (int i = 0; i < g->devices; i++)
      for (int j = 0; j < g->devices; j++)
        if (i != j) die_route(g, n, i, j);
  npu_buf_puts(g->o, "  </zone>\n");
  g->st.zones++;
}

/*
 * One SuperPoD: dies, a router per node (its switch tier) and one for the pod's second tier;
 * routes only between neighbours, SimGrid finds the shortest (by link count) and caches it.
 */
static void pod_zone(struct gen *g, int pod, int first, int last)
{
  const struct arch_cluster *c = &g->sys->cluster;
  bool mesh = ic_topo_full_mesh(g->t);
  double die = c->superpod.bw_bytes_per_s * c->superpod.efficiency.value;
  char id[96], id2[96], a_[32];
  npu_buf_printf(g->o, "  <zone id=\"pod%d\" routing=\"DijkstraCache\">\n", pod);
  for (int n = first; n < last; n++) hosts(g, n);
  for (int n = first; n < last; n++) npu_buf_printf(g->o, "    <router id=\"n%d.sw\"/>\n", n);
  npu_buf_printf(g->o, "    <router id=\"pod%d.core\"/>\n", pod);
  for (int n = first; n < last; n++) {
    node_links(g, n);
    for (int a = 0; a < g->packages && (mesh || g->packages < 2); a++) {
      snprintf(id, sizeof id, "n%d.p%d.ub.up", n, a);
      link(g, id, g->dies * die);
      snprintf(id, sizeof id, "n%d.p%d.ub.dn", n, a);
      link(g, id, g->dies * die);
    }
    snprintf(id, sizeof id, "n%d.up", n);
    link(g, id, g->devices * die / c->superpod.oversubscription);
    snprintf(id, sizeof id, "n%d.dn", n);
    link(g, id, g->devices * die / c->superpod.oversubscription);
  }
  for (int n = first; n < last; n++) {
    char sw[32], core[32];
    snprintf(sw, sizeof sw, "n%d.sw", n);
    snprintf(core, sizeof core, "pod%d.core", pod);
    for (int i = 0; i < g->devices; i++) {
      int a = i / g->dies;
      snprintf(a_, sizeof a_, "r%d", n * g->devices + i);
      if (mesh || g->packages < 2) {
        snprintf(id, sizeof id, "n%d.p%d.ub.up", n, a);
        snprintf(id2, sizeof id2, "n%d.p%d.ub.dn", n, a);
      } else {
        snprintf(id, sizeof id, "n%d.p%d.up", n, a);
        snprintf(id2, sizeof id2, "n%d.p%d.dn", n, a);
      }
      route(g, a_, sw, id, NULL);
      route(g, sw, a_, id2, NULL);
      for (int j = 0; j < g->devices; j++) {
        if (i == j) continue;
        /* same package: SIO; full mesh: the direct link (switched: through n<n>.sw) */
        if (a == j / g->dies || mesh) die_route(g, n, i, j);
      }
    }
    snprintf(id, sizeof id, "n%d.up", n);
    route(g, sw, core, id, NULL);
    snprintf(id, sizeof id, "n%d.dn", n);
    route(g, core, sw, id, NULL);
  }
  npu_buf_puts(g->o, "  </zone>\n");
  g->st.zones++;
}

/* The scale-out fat tree over every r<rank>.nic (and padding), SimGrid's FAT_TREE cluster. */
static void scaleout(struct gen *g)
{
  const struct ic_fat_tree *f = ic_topo_fat_tree(g->t);
  int ranks = ic_topo_platform_ranks(g->t);
  char num[64];
  npu_fmt_double(ic_topo_class_bw(g->t, IC_CLASS_NIC), num, sizeof num);
  npu_buf_printf(g->o, "  <cluster id=\"scaleout\" prefix=\"r\" suffix=\".nic\" radical=\"");
  /* endpoints in slot order (padding numbered after the ranks), consecutive runs as ranges */
  int *id = npu_xmalloc((size_t)f->slots * sizeof *id);
  for (int s = 0, pad = ranks; s < f->slots; s++) {
    int r = ic_topo_slot_rank(g->t, s);
    id[s] = r >= 0 ? r : pad++;
  }
  for (int s = 0; s < f->slots;) {
    int e = s + 1;
    while (e < f->slots && id[e] == id[e - 1] + 1) e++;
    if (e - s == 1) npu_buf_printf(g->o, "%s%d", s ? "," : "", id[s]);
    else npu_buf_printf(g->o, "%s%d-%d", s ? "," : "", id[s], id[e - 1]);
    s = e;
  }
  free(id);
  npu_buf_printf(g->o, "\" speed=\"1f\" bw=\"%sBps\" lat=\"0s\" sharing_policy=\"SPLITDUPLEX\" "
                       "topology=\"FAT_TREE\" topo_parameters=\"", num);
  if (f->tiers == 1)
    npu_buf_printf(g->o, "1;%d;1;1", f->leaf_down);
  else if (f->tiers == 2)
    npu_buf_printf(g->o, "2;%d,%d;1,%d;1,1", f->leaf_down, f->leaves, f->leaf_up);
  else
    npu_buf_printf(g->o, "3;%d,%d,%d;1,%d,%d;1,1,1", f->leaf_down, f->leaves_per_pod, f->pods,
                   f->leaf_up, f->agg_up);
  npu_buf_puts(g->o, "\"/>\n");
  g->st.hosts += (size_t)f->slots;
  g->st.zones++;
}

void ic_platform_xml(const struct ic_topo *t, struct npu_buf *o, struct ic_platform_stats *stats)
{
  struct gen g = {.t = t, .sys = ic_topo_system(t), .o = o};
  g.devices = ic_topo_devices_per_node(t);
  g.dies = g.sys->has_node ? g.sys->node.dies_per_package : 1;
  g.packages = g.devices / g.dies;
  npu_buf_puts(o, "<?xml version='1.0'?>\n"
                  "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
                  "<platform version=\"4.1\">\n<zone id=\"npusim\" routing=\"Full\">\n");
  int nodes = ic_topo_nodes(t), pod = ic_topo_pod_nodes(t);
  if (pod > 0) {
    for (int first = 0, q = 0; first < nodes; first += pod, q++)
      pod_zone(&g, q, first, first + pod < nodes ? first + pod : nodes);
  } else {
    int per = GROUP_HOSTS / g.devices;
    if (per < 1) per = 1;
    for (int first = 0, z = 0; first < nodes; first += per, z++)
      group_zone(&g, z, first, first + per < nodes ? first + per : nodes);
  }
  if (ic_topo_has_nic(t)) scaleout(&g);
  npu_buf_puts(o, "</zone>\n</platform>\n");
  if (stats) *stats = g.st;
}
