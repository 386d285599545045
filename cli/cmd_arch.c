/*
 * cmd_arch.c - `npusim arch`: list the hardware presets, show a description with its derived
 * figures (text, JSON with stable keys, or the effective libconfig configuration).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "arch/derived.h"
#include "cli/cli.h"
#include "common/cfg.h"
#include "common/err.h"
#include "common/json.h"
#include "common/units.h"
#ifdef NPUSIM_HAVE_RUN
#include "workloads/job.h"
#endif

static const char usage[] =
    "usage: npusim arch list [--json]\n"
    "       npusim arch keys\n"
    "       npusim arch show NAME|FILE [--set KEY=VALUE]... [--json | --config]\n"
    "\n"
    "list   the hardware presets (chips, servers, clusters)\n"
    "keys   every key of a description: type or unit, default, meaning (Markdown table)\n"
    "show   a hardware description and the figures derived from it: peak dense FLOP/s per\n"
    "       input type (cube cores x MAC/cycle x 2 x clock), vector FLOP/s, HBM and L2\n"
    "       bandwidth, machine balance, per-device intra-node and scale-out bandwidth.\n"
    "\n"
    "NAME is a preset (see 'npusim arch list'); FILE is a scenario or description file (a path\n"
    "with '/' or ending in .cfg).\n"
    "\n"
    "options:\n"
    "  --set KEY=VALUE  override one value, e.g. --set chip.hbm.bandwidth=3.2TBps; repeatable,\n"
    "                   applied in order after the file; KEY may be SECTION.preset\n"
    "  --json           print JSON (stable keys: .chip, .node, .cluster, .derived)\n"
    "  --config         print the effective configuration as a loadable file, each value\n"
    "                   commented with where it came from\n";

/* A loaded description and the loader that remembers where each value came from. */
struct loaded {
  struct npu_cfg *cfg;
  struct arch_system sys;
#ifdef NPUSIM_HAVE_RUN
  struct wl_model model;
  struct wl_plan plan;
  struct wl_run run;
#endif
};

static int load(struct loaded *l, const char *spec, const struct cli_sets *sets,
                struct npu_diag *diag)
{
  l->cfg = npu_cfg_create();
  npu_cfg_set_display_root(l->cfg, arch_source_root());
  arch_register(l->cfg, &l->sys);
#ifdef NPUSIM_HAVE_RUN
  /* a training scenario loads too: its workload sections are read and not shown */
  wl_model_register(l->cfg, &l->model);
  wl_plan_register(l->cfg, &l->plan);
  wl_run_register(l->cfg, &l->run);
#endif
  int rc = npu_cfg_load_spec(l->cfg, spec, diag);
  for (int i = 0; rc == 0 && i < sets->n; i++) rc = npu_cfg_set(l->cfg, sets->items[i], diag);
  if (rc == 0) rc = arch_finish(l->cfg, &l->sys, diag);
  return rc;
}

static void unit_text(char *buf, size_t n, double v, enum npu_unit_kind kind)
{
  npu_unit_format(v, kind, buf, n);
}

static void write_text(const struct loaded *l, struct npu_buf *o)
{
  const struct arch_system *s = &l->sys;
  const struct arch_chip *c = &s->chip;
  struct arch_derived d;
  arch_derive(s, &d);
  char a[64], b[64], e[64];

  unit_text(a, sizeof a, c->clock_hz, NPU_UNIT_FREQUENCY);
  npu_buf_printf(o, "%s (%s)\n", c->title, c->name);
  if (c->org == ARCH_ORG_SPLIT)
    npu_buf_printf(o, "  cores            split: %d cube (AIC) + %d vector (AIV) at %s\n",
                   c->aic_count, c->aiv_count, a);
  else
    npu_buf_printf(o, "  cores            coupled: %d cores (cube + vector) at %s\n",
                   c->aic_count, a);
  unit_text(a, sizeof a, (double)c->hbm.size_bytes, NPU_UNIT_SIZE);
  unit_text(b, sizeof b, (double)c->l2.size_bytes, NPU_UNIT_SIZE);
  npu_buf_printf(o, "  memory           HBM %s, L2 %s\n", a, b);
  npu_buf_printf(o, "  buffers per core");
  for (int i = 0; i < ARCH_BUF_COUNT; i++) {
    unit_text(a, sizeof a, (double)c->buf[i].size_bytes, NPU_UNIT_SIZE);
    npu_buf_printf(o, "%s %s %s", i ? "," : "", arch_buf_name((enum arch_buf)i), a);
  }
  npu_buf_puts(o, "\n");

  unit_text(a, sizeof a, c->clock_hz, NPU_UNIT_FREQUENCY);
  npu_buf_puts(o, "\npeak dense FLOP/s = cube cores x MAC/cycle x 2 x clock\n");
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
    if (!c->cube.macs_per_cycle[t]) continue;
    npu_fmt_human(d.peak_flops_per_s[t], "FLOP/s", b, sizeof b);
    npu_buf_printf(o, "  %-10s %16s = %d x %d x 2 x %s\n", npu_dtype_name((enum npu_dtype)t),
                   b, c->aic_count, c->cube.macs_per_cycle[t], a);
  }
  npu_buf_puts(o, "vector FLOP/s = vector cores x lanes x FLOP/lane x clock\n");
  npu_fmt_human(d.vector_flops_per_s_fp16, "FLOP/s", b, sizeof b);
  npu_buf_printf(o, "  %-10s %16s = %d x %g x %g x %s\n", "fp16", b, c->aiv_count,
                 c->vector.bytes_per_cycle / 2, c->vector.flops_per_element, a);
  npu_fmt_human(d.vector_flops_per_s_fp32, "FLOP/s", b, sizeof b);
  npu_buf_printf(o, "  %-10s %16s = %d x %g x %g x %s\n", "fp32", b, c->aiv_count,
                 c->vector.bytes_per_cycle / 4, c->vector.flops_per_element, a);

  npu_buf_puts(o, "bandwidth\n");
  npu_fmt_human(d.hbm_bw_bytes_per_s, "B/s", b, sizeof b);
  npu_buf_printf(o, "  %-27s %12s\n", "HBM, aggregate", b);
  npu_fmt_human(d.l2_bw_bytes_per_s, "B/s", b, sizeof b);
  npu_buf_printf(o, "  %-27s %12s\n", "L2, aggregate", b);
  npu_fmt_human(d.core_gm_read_bw_bytes_per_s, "B/s", b, sizeof b);
  npu_buf_printf(o, "  %-27s %12s\n", "GM read port, one core", b);
  npu_buf_puts(o, "machine balance = peak / HBM bandwidth\n");
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
    if (t != NPU_DT_FP16 && t != NPU_DT_BF16 && t != NPU_DT_FP8_E4M3 && t != NPU_DT_INT8)
      continue;
    if (!c->cube.macs_per_cycle[t]) continue;
    npu_buf_printf(o, "  %-10s %10.1f FLOP/byte\n", npu_dtype_name((enum npu_dtype)t),
                   d.balance_flops_per_byte[t]);
  }

  if (s->has_node) {
    const struct arch_node *n = &s->node;
    unit_text(a, sizeof a, n->link.bw_bytes_per_s, NPU_UNIT_BANDWIDTH);
    unit_text(e, sizeof e, n->link.latency_s, NPU_UNIT_TIME);
    npu_buf_printf(o, "\nnode %s: %d devices", n->name, n->devices);
    if (n->dies_per_package > 1) {
      unit_text(b, sizeof b, n->d2d.bw_bytes_per_s, NPU_UNIT_BANDWIDTH);
      npu_buf_printf(o, " (%d packages of %d dies, die-to-die %s)", d.packages_per_node,
                     n->dies_per_package, b);
    }
    npu_buf_printf(o, ", %s, %d links of %s and %s per package\n",
                   n->topology == ARCH_NODE_FULL_MESH ? "full mesh" : "switched", n->link.ports,
                   a, e);
    npu_fmt_human(d.intra_node_bw_bytes_per_s, "B/s", b, sizeof b);
    npu_buf_printf(o, "  %-27s %12s\n", "intra-node, per device", b);
  }
  if (s->has_cluster) {
    const struct arch_cluster *cl = &s->cluster;
    static const char *topo[] = {"no scale-out network", "fat tree", "rail-optimized Clos"};
    npu_buf_printf(o, "\ncluster %s: %d node%s, %lld devices, %s", cl->name, cl->nodes,
                   cl->nodes == 1 ? "" : "s", d.devices, topo[cl->scaleout.topology]);
    if (cl->scaleout.topology != ARCH_SCALEOUT_NONE)
      npu_buf_printf(o, " (%d tiers of %d-port switches, oversubscription %g)",
                     cl->scaleout.tiers, cl->scaleout.switch_radix, cl->scaleout.oversubscription);
    npu_buf_puts(o, "\n");
    if (cl->superpod.nodes) {
      npu_fmt_human(d.superpod_bw_bytes_per_s, "B/s", b, sizeof b);
      npu_buf_printf(o, "  SuperPoD of %d nodes, %d-tier fabric\n", cl->superpod.nodes,
                     cl->superpod.tiers);
      npu_buf_printf(o, "  %-27s %12s\n", "SuperPoD fabric, per device", b);
    }
    npu_fmt_human(d.scale_out_bw_bytes_per_s, "B/s", b, sizeof b);
    npu_buf_printf(o, "  %-27s %12s\n", "scale-out, per device", b);
    npu_fmt_human(d.peak_flops_per_s[NPU_DT_BF16] * (double)d.devices, "FLOP/s", b, sizeof b);
    if (c->cube.macs_per_cycle[NPU_DT_BF16])
      npu_buf_printf(o, "  %-27s %12s\n", "system peak, bf16", b);
  }
}

static void write_json(const struct loaded *l, struct npu_buf *o)
{
  const struct arch_system *s = &l->sys;
  struct arch_derived d;
  arch_derive(s, &d);
  struct npu_json j;
  npu_json_init(&j, o);
  npu_json_object_begin(&j);
  npu_json_key(&j, "chip");
  npu_cfg_write_json(l->cfg, "chip", &j);
  npu_json_key(&j, "node");
  if (s->has_node)
    npu_cfg_write_json(l->cfg, "node", &j);
  else
    npu_json_null(&j);
  npu_json_key(&j, "cluster");
  if (s->has_cluster)
    npu_cfg_write_json(l->cfg, "cluster", &j);
  else
    npu_json_null(&j);

  npu_json_key(&j, "derived");
  npu_json_object_begin(&j);
  npu_json_key(&j, "peak_flops_per_s");
  npu_json_object_begin(&j);
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
    if (!s->chip.cube.macs_per_cycle[t]) continue;
    npu_json_key(&j, npu_dtype_name((enum npu_dtype)t));
    npu_json_number(&j, d.peak_flops_per_s[t]);
  }
  npu_json_object_end(&j);
  npu_json_key(&j, "vector_flops_per_s");
  npu_json_object_begin(&j);
  npu_json_key(&j, "fp16");
  npu_json_number(&j, d.vector_flops_per_s_fp16);
  npu_json_key(&j, "fp32");
  npu_json_number(&j, d.vector_flops_per_s_fp32);
  npu_json_object_end(&j);
  npu_json_key(&j, "hbm_bw_bytes_per_s");
  npu_json_number(&j, d.hbm_bw_bytes_per_s);
  npu_json_key(&j, "l2_bw_bytes_per_s");
  npu_json_number(&j, d.l2_bw_bytes_per_s);
  npu_json_key(&j, "core_gm_read_bw_bytes_per_s");
  npu_json_number(&j, d.core_gm_read_bw_bytes_per_s);
  npu_json_key(&j, "machine_balance_flops_per_byte");
  npu_json_object_begin(&j);
  for (int t = 0; t < NPU_DT_CUBE_COUNT; t++) {
    if (!s->chip.cube.macs_per_cycle[t]) continue;
    npu_json_key(&j, npu_dtype_name((enum npu_dtype)t));
    npu_json_number(&j, d.balance_flops_per_byte[t]);
  }
  npu_json_object_end(&j);
  npu_json_key(&j, "intra_node_bw_bytes_per_s");
  if (s->has_node) npu_json_number(&j, d.intra_node_bw_bytes_per_s); else npu_json_null(&j);
  npu_json_key(&j, "superpod_bw_bytes_per_s");
  if (s->has_cluster && s->cluster.superpod.nodes)
    npu_json_number(&j, d.superpod_bw_bytes_per_s);
  else
    npu_json_null(&j);
  npu_json_key(&j, "scale_out_bw_bytes_per_s");
  if (s->has_cluster) npu_json_number(&j, d.scale_out_bw_bytes_per_s); else npu_json_null(&j);
  npu_json_key(&j, "devices");
  npu_json_int(&j, d.devices);
  npu_json_object_end(&j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
}

static int show(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  const char *spec = NULL;
  bool json = false, config = false;
  struct cli_sets sets = {0};
  int rc = 0;
  for (int i = 2; i < argc; i++) {
    int took = cli_take_set(argc, argv, &i, &sets, diag);
    if (took < 0) {
      rc = NPU_EINVAL;
      goto out;
    }
    if (took) continue;
    if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--config") == 0) {
      config = true;
    } else if (argv[i][0] != '-' && !spec) {
      spec = argv[i];
    } else {
      rc = cli_bad_arg(diag, "arch show", argv[i]);
      goto out;
    }
  }
  if (!spec) {
    rc = npu_diag_set(diag, "command line", 0, NULL,
                      "'arch show' needs a preset name or a file (see 'npusim arch list')");
    goto out;
  }
  if (json && config) {
    rc = npu_diag_set(diag, "command line", 0, NULL, "--json and --config exclude each other");
    goto out;
  }
  struct loaded l = {0};
  rc = load(&l, spec, &sets, diag);
  if (rc == 0) {
    if (json)
      write_json(&l, out);
    else if (config)
      npu_cfg_write_config(l.cfg, out);
    else
      write_text(&l, out);
  }
  npu_cfg_destroy(l.cfg);
out:
  free(sets.items);
  return rc;
}

static int list(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  bool json = false;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0)
      json = true;
    else
      return cli_bad_arg(diag, "arch list", argv[i]);
  }
  struct npu_cfg *probe = npu_cfg_create();
  struct arch_system unused;
  arch_register(probe, &unused);
  char **names;
  size_t n;
  npu_cfg_list_presets(probe, &names, &n);
  npu_cfg_destroy(probe);

  struct npu_json j;
  if (json) {
    npu_json_init(&j, out);
    npu_json_array_begin(&j);
  } else {
    npu_buf_printf(out, "%-20s %-8s %-26s %s\n", "preset", "kind", "chip", "devices");
  }
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    struct loaded l = {0};
    struct cli_sets none = {0};
    rc = load(&l, names[i], &none, diag);
    if (rc == 0) {
      struct arch_derived d;
      arch_derive(&l.sys, &d);
      const char *kind = l.sys.has_cluster ? "cluster" : l.sys.has_node ? "node" : "chip";
      if (json) {
        npu_json_object_begin(&j);
        npu_json_key(&j, "name");
        npu_json_string(&j, names[i]);
        npu_json_key(&j, "kind");
        npu_json_string(&j, kind);
        npu_json_key(&j, "chip");
        npu_json_string(&j, l.sys.chip.name);
        npu_json_key(&j, "devices");
        npu_json_int(&j, d.devices);
        npu_json_object_end(&j);
      } else {
        npu_buf_printf(out, "%-20s %-8s %-26s %lld\n", names[i], kind, l.sys.chip.title,
                       d.devices);
      }
    }
    npu_cfg_destroy(l.cfg);
  }
  if (json && rc == 0) {
    npu_json_array_end(&j);
    npu_json_finish(&j);
  }
  npu_cfg_free_names(names, n);
  return rc;
}

static int keys(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc > 2) return cli_bad_arg(diag, "arch keys", argv[2]);
  struct npu_cfg *cfg = npu_cfg_create();
  struct arch_system sys;
  arch_register(cfg, &sys);
  npu_cfg_write_keys(cfg, out);
  npu_cfg_destroy(cfg);
  return 0;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *diag)
{
  if (argc < 2)
    return npu_diag_set(diag, "command line", 0, NULL, "'arch' needs 'list', 'show' or 'keys' (see 'npusim help arch')");
  if (strcmp(argv[1], "show") == 0) return show(argc, argv, out, diag);
  if (strcmp(argv[1], "list") == 0) return list(argc, argv, out, diag);
  if (strcmp(argv[1], "keys") == 0) return keys(argc, argv, out, diag);
  const char *subs[] = {"list", "show", "keys"};
  const char *sug = npu_suggest(argv[1], subs, 3);
  return npu_diag_set(diag, "command line", 0, NULL,
                      "'arch' has no subcommand '%s'%s%s%s (expected 'list', 'show' or 'keys')", argv[1],
                      sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
}

const struct npu_cmd npu_cmd_arch = {"arch", "hardware presets and descriptions, with derived peaks",
                                     usage, run, NULL};
