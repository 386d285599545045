/*
 * test_checks.c - contradictory descriptions are refused with a message that names the file,
 * line and key.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "common/cfg.h"
#include "tests/support/support.h"

static char *dir;

static void setup(void) { dir = ts_tmpdir(); }
static void teardown(void)
{
  ts_rmtree(dir);
  free(dir);
}

TestSuite(checks, .init = setup, .fini = teardown, .timeout = 10);

/* Load text as d.cfg; return the formatted diagnostic ("" when it loads). */
static const char *check(const char *text)
{
  static char msg[2048];
  char *path = ts_write(dir, "d.cfg", text);
  struct npu_cfg *cfg = npu_cfg_create();
  npu_cfg_set_display_root(cfg, dir);
  struct arch_system sys;
  arch_register(cfg, &sys);
  struct npu_diag d;
  npu_diag_clear(&d);
  int rc = npu_cfg_load_file(cfg, path, &d);
  if (rc == 0) rc = arch_finish(cfg, &sys, &d);
  npu_diag_format(&d, msg, sizeof msg);
  if (rc == 0) msg[0] = '\0';
  npu_cfg_destroy(cfg);
  free(path);
  return msg;
}

Test(checks, a_good_override_loads)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\ncluster = { nodes = 16; };\n"), "");
}

Test(checks, zero_cores)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { aic_count = 0; };\n"),
                   "d.cfg:2: chip.aic_count: must be positive, got '0'");
}

/* A clock no chip has (issue 19: 1e-300Hz was accepted and failed 30 s later without a place) */
Test(checks, a_clock_no_chip_has)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { clock = \"1e-300Hz\"; };\n"),
                   "d.cfg:2: chip.clock: must be between 1000000 and 100000000000, got '1e-300Hz'");
}

Test(checks, ub_smaller_than_a_fractal)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = {\n  ub = { size = \"256B\"; };\n};\n"),
                   "d.cfg:3: chip.ub.size: smaller than one fractal: 256 bytes, need at least 512");
}

Test(checks, l0c_smaller_than_a_fractal_of_accumulators)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { l0c = { size = \"512B\"; }; };\n"),
                   "d.cfg:2: chip.l0c.size: smaller than one fractal: 512 bytes, need at least 1024");
}

Test(checks, misaligned_buffer)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { l1 = { align = \"48B\"; }; };\n"),
                   "d.cfg:2: chip.l1.align: alignment must be a power of two, got 48 bytes");
}

Test(checks, split_cores_must_divide)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { aiv_count = 50; };\n"),
                   "d.cfg:2: chip.aiv_count: a split chip needs a whole number of vector cores per "
                   "cube core (50 AIV for 24 AIC)");
}

Test(checks, coupled_cores_must_match)
{
  cr_assert_str_eq(check("preset = \"nvidia-a100-80gb\";\nchip = { aiv_count = 216; };\n"),
                   "d.cfg:2: chip.aiv_count: a coupled chip has one vector unit per core: expected "
                   "108, got 216");
}

Test(checks, a_cube_with_no_input_type)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { cube = { macs_per_cycle = { fp16 = 0; "
                         "bf16 = 0; hf32 = 0; fp32 = 0; int8 = 0; int4 = 0; }; }; };\n"),
                   "d.cfg:2: chip.cube.macs_per_cycle.fp16: the cube supports no input type: set "
                   "chip.cube.macs_per_cycle.<dtype>");
}

Test(checks, hbm_faster_than_l2)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\nchip = { hbm = { bandwidth = \"5TBps\"; }; };\n"),
                   "d.cfg:2: chip.hbm.bandwidth: HBM faster than L2 (all GM traffic goes through L2)");
}

Test(checks, a_mesh_that_cannot_wire_its_devices)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\nnode = {\n  devices = 16;\n};\n"),
                   "d.cfg:3: node.devices: a full mesh of 16 packages needs 15 links per package, "
                   "but node.link.ports is 7");
}

Test(checks, a_switch_without_ports)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\nnode = { topology = \"switch\"; };\n"),
                   "d.cfg:2: node.switch_ports: required for topology 'switch'");
}

Test(checks, a_switch_too_small)
{
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { devices = 32; };\n"),
                   "d.cfg:2: node.devices: 32 packages x 12 links need 384 switch ports, but "
                   "node.switch_ports is 216");
}

Test(checks, dies_must_fill_packages)
{
  cr_assert_str_eq(check("preset = \"atlas-a3-superpod\";\nnode = { devices = 15; };\n"),
                   "d.cfg:2: node.devices: 15 devices do not fill whole packages of 2 dies");
}

Test(checks, several_nodes_need_a_network)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\ncluster = {\n  nodes = 4;\n  scaleout = { "
                         "topology = \"none\"; };\n};\n"),
                   "d.cfg:4: cluster.scaleout.topology: 4 nodes need a scale-out network, got 'none'");
}

Test(checks, a_network_too_small)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\ncluster = { nodes = 1000; scaleout = { "
                         "switch_radix = 16; }; };\n"),
                   "d.cfg:2: cluster.nodes: 1000 nodes x 8 devices x 1 NICs = 8000 endpoints, but 2 "
                   "tiers of 16-port switches wire at most 128");
}

Test(checks, superpod_needs_its_fabric)
{
  cr_assert_str_eq(check("preset = \"atlas-800t-a2\";\ncluster = {\n  superpod = { nodes = 1; };\n};\n"),
                   "d.cfg:2: cluster.superpod.bandwidth: required when cluster.superpod.nodes is set");
}

Test(checks, cluster_needs_a_node)
{
  cr_assert_str_eq(check("preset = \"ascend-910b2\";\ncluster = { nodes = 2; scaleout = { topology = "
                         "\"fat_tree\"; nic_bandwidth = \"200Gbps\"; nic_latency = \"2us\"; }; };\n"),
                   "d.cfg:2: cluster.nodes: a cluster needs a node section");
}

/* node.link.efficiency_curve: pairs SIZE:FRACTION, sizes increasing, fractions of the link's
 * capacity in (0, 1], each refusal at the curve's line. */
Test(checks, a_bad_efficiency_curve)
{
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { link = { efficiency_curve = \"1MiB 0.5\"; }; };\n"),
                   "d.cfg:2: node.link.efficiency_curve: expected SIZE:FRACTION pairs like \"8MiB:0.75\", got "
                   "\"1MiB 0.5\"");
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { link = { efficiency_curve = \"8MiB:0.5 1MiB:0.6\"; }; };\n"),
                   "d.cfg:2: node.link.efficiency_curve: point 2: sizes must increase (1MiB after a larger or equal "
                   "one)");
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { link = {\nefficiency_curve = \"1MiB:0.4, 8MiB:1.2\"; }; };\n"),
                   "d.cfg:3: node.link.efficiency_curve: point 2: fraction 1.2 is outside (0, 1] (of "
                   "node.link.efficiency, the link's capacity)");
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { link = { efficiency_curve = \"1MiB:x\"; }; };\n"),
                   "d.cfg:2: node.link.efficiency_curve: point 1: expected a fraction after '1MiB:'");
  cr_assert_str_eq(check("preset = \"dgx-a100\";\nnode = { link = { efficiency_curve = \"1QiB:0.5\"; }; };\n"),
                   "d.cfg:2: node.link.efficiency_curve: point 1: unknown unit 'QiB': expected a size like '192KiB'");
}

/* The fraction at a size: the knots' values, linear in log(size) between them (halfway in log
 * between 1 MiB and 4 MiB is 2 MiB), held at the ends; without a curve, 1; a point-to-point
 * transfer gets node.link.p2p_fraction where it is set. */
Test(checks, the_link_fraction_follows_the_curve_in_log_size)
{
  struct arch_node n = {.link_efficiency = {.value = 0.8}};
  char why[256];
  cr_assert_eq(arch_curve_parse("1MiB:0.4 4MiB:0.6 1GiB:1", &n.link_curve, why, sizeof why), 0, "%s", why);
  cr_assert_float_eq(arch_link_fraction(&n, 2.0 * 1024 * 1024, false), 0.5, 1e-12);
  cr_assert_float_eq(arch_link_fraction(&n, 1024, false), 0.4, 1e-12);
  cr_assert_float_eq(arch_link_fraction(&n, 1e12, false), 1, 1e-12);
  cr_assert_float_eq(arch_link_fraction(&n, 4.0 * 1024 * 1024, false), 0.6, 1e-12);
  cr_assert_float_eq(arch_link_fraction(&n, 2.0 * 1024 * 1024, true), 0.5, 1e-12, "p2p unset: the curve");
  n.link_p2p_fraction = 0.3;
  cr_assert_float_eq(arch_link_fraction(&n, 2.0 * 1024 * 1024, true), 0.3, 1e-12);
  n.link_curve.n = 0;
  cr_assert_float_eq(arch_link_fraction(&n, 2.0 * 1024 * 1024, false), 1, 1e-12);
}
