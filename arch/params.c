/*
 * params.c - the parameter table of the hardware description: every key a scenario may set
 * under chip, node and cluster, with type, default, range and one line of meaning.
 * docs/SCENARIOS.md is the long form of this table; tests check that both list the same keys.
 */
#include "arch/arch.h"

#include <stddef.h>

#include "common/err.h"

#define NPU_PARAM_STRUCT struct arch_system

/* Required value: no default. */
#define REQ(name, type, field, flags, desc) \
  {name, type, NPU_PARAM_OFF(field), 0, NULL, flags, 0, 0, NULL, desc}
/* Optional value with a default. */
#define OPT(name, type, field, def, flags, desc) \
  {name, type, NPU_PARAM_OFF(field), 0, def, flags, 0, 0, NULL, desc}
#define RANGE(name, type, field, def, lo, hi, desc) \
  {name, type, NPU_PARAM_OFF(field), 0, def, 0, lo, hi, NULL, desc}
#define CALIB(prefix, field, what)                                                         \
  {prefix, NPU_PT_REAL, NPU_PARAM_OFF(field.value), 0, "1.0", NPU_PF_FRACTION, 0, 0, NULL, \
   "achievable share of peak " what},                                                      \
  {prefix "_source", NPU_PT_STRING, NPU_PARAM_OFF(field.source), NPU_PARAM_SZ(field.source),\
   "uncalibrated: ideal hardware", 0, 0, 0, NULL, "measurement the fraction comes from"}

static const char *const org_names[] = {"split", "coupled", NULL};
static const char *const node_topo_names[] = {"full_mesh", "switch", NULL};
static const char *const scaleout_names[] = {"none", "fat_tree", "rail_clos", NULL};

#define MACS_X(e, dt, bits)                                                             \
  OPT("chip.cube.macs_per_cycle." dt, NPU_PT_INT, chip.cube.macs_per_cycle[NPU_DT_##e], \
      "0", NPU_PF_NONNEG, "MAC per cycle per cube core for " dt " inputs; 0: unsupported"),
#define PATH(e, name, desc)                                                              \
  OPT("chip.dma.bytes_per_cycle." name, NPU_PT_REAL,                                     \
      chip.dma.path_bytes_per_cycle[ARCH_PATH_##e], "0", NPU_PF_NONNEG,                  \
      desc " rate per core, bytes per cycle; 0: path absent"),
#define BUF(name, idx, what)                                                             \
  REQ("chip." name ".size", NPU_PT_SIZE, chip.buf[idx].size_bytes, NPU_PF_POSITIVE,      \
      what " capacity per core"),                                                        \
  REQ("chip." name ".align", NPU_PT_SIZE, chip.buf[idx].align_bytes, NPU_PF_POSITIVE,    \
      what " address alignment")

static const struct npu_param params[] = {
    /* chip */
    NPU_PARAM_STR("chip.name", chip.name, NULL, "preset name of the chip"),
    NPU_PARAM_STR("chip.title", chip.title, "", "human-readable chip name"),
    NPU_PARAM_ENUM("chip.organisation", chip.org, NULL, org_names,
         "split: separate cube (AIC) and vector (AIV) cores; coupled: one core holds both"),
    REQ("chip.aic_count", NPU_PT_INT, chip.aic_count, NPU_PF_POSITIVE,
        "cube cores (AIC); streaming multiprocessors on GPUs"),
    REQ("chip.aiv_count", NPU_PT_INT, chip.aiv_count, NPU_PF_POSITIVE,
        "vector cores (AIV); equal to aic_count when coupled"),
    {"chip.clock", NPU_PT_FREQUENCY, NPU_PARAM_OFF(chip.clock_hz), 0, NULL, NPU_PF_POSITIVE, 1e6, 1e11, NULL,
     "core clock (1 MHz to 100 GHz: a clock outside that is a typo, not a chip)"},
    OPT("chip.cube.fractal_m", NPU_PT_INT, chip.cube.fractal_m, "16", NPU_PF_POSITIVE,
        "rows of the left fractal"),
    OPT("chip.cube.fractal_n", NPU_PT_INT, chip.cube.fractal_n, "16", NPU_PF_POSITIVE,
        "columns of the right fractal"),
    OPT("chip.cube.fractal_k_bytes", NPU_PT_INT, chip.cube.fractal_k_bytes, "32",
        NPU_PF_POSITIVE, "bytes of K in a fractal row; K0 = this / element size"),
    NPU_CUBE_DTYPE_MAP(MACS_X)
    REQ("chip.vector.bytes_per_cycle", NPU_PT_REAL, chip.vector.bytes_per_cycle,
        NPU_PF_POSITIVE, "elementwise throughput per vector core, bytes per cycle"),
    OPT("chip.vector.block_bytes", NPU_PT_INT, chip.vector.block_bytes, "32", NPU_PF_POSITIVE,
        "bytes per block of a vector repeat"),
    OPT("chip.vector.repeat_max", NPU_PT_INT, chip.vector.repeat_max, "255", NPU_PF_POSITIVE,
        "repeats one vector instruction can issue"),
    OPT("chip.vector.flops_per_element", NPU_PT_REAL, chip.vector.flops_per_element, "1",
        NPU_PF_POSITIVE, "FLOP per lane per cycle counted in the vector peak (2 with FMA)"),
    REQ("chip.vector.transcendental_cycles", NPU_PT_REAL, chip.vector.transcendental_cycles,
        NPU_PF_POSITIVE, "cycles per repeat of exp, ln, rsqrt, reciprocal"),
    BUF("l1", ARCH_BUF_L1, "L1 buffer"),
    BUF("l0a", ARCH_BUF_L0A, "L0A (left operand)"),
    BUF("l0b", ARCH_BUF_L0B, "L0B (right operand)"),
    BUF("l0c", ARCH_BUF_L0C, "L0C (accumulator)"),
    BUF("ub", ARCH_BUF_UB, "unified buffer per vector core"),
    REQ("chip.ub.banks", NPU_PT_INT, chip.ub.banks, NPU_PF_POSITIVE, "UB banks"),
    REQ("chip.ub.bank_groups", NPU_PT_INT, chip.ub.bank_groups, NPU_PF_POSITIVE,
        "UB bank groups; consecutive 32-byte rows go to consecutive groups"),
    REQ("chip.ub.bank_bytes", NPU_PT_SIZE, chip.ub.bank_bytes, NPU_PF_POSITIVE,
        "one UB bank; the bank within a group is address / (bank_bytes x bank_groups)"),
    OPT("chip.ub.read_ports_per_group", NPU_PT_INT, chip.ub.read_ports_per_group, "1",
        NPU_PF_POSITIVE, "reads one bank group serves per cycle"),
    REQ("chip.ub.read_bytes_per_cycle", NPU_PT_REAL, chip.ub.read_bytes_per_cycle,
        NPU_PF_POSITIVE, "UB read port, bytes per cycle"),
    REQ("chip.ub.write_bytes_per_cycle", NPU_PT_REAL, chip.ub.write_bytes_per_cycle,
        NPU_PF_POSITIVE, "UB write port, bytes per cycle"),
    BUF("bias_table", ARCH_BUF_BT, "BiasTable"),
    BUF("fixpipe_buf", ARCH_BUF_FB, "FixPipe buffer (quantisation parameters)"),
    REQ("chip.dma.gm_read_bytes_per_cycle", NPU_PT_REAL, chip.dma.gm_read_bytes_per_cycle,
        NPU_PF_POSITIVE, "a core's port for reads from GM through L2, bytes per cycle"),
    REQ("chip.dma.gm_write_bytes_per_cycle", NPU_PT_REAL, chip.dma.gm_write_bytes_per_cycle,
        NPU_PF_POSITIVE, "a core's port for writes to GM, bytes per cycle"),
    ARCH_PATH_MAP(PATH)
    REQ("chip.dma.burst", NPU_PT_SIZE, chip.dma.burst_bytes, NPU_PF_POSITIVE,
        "GM burst: transfers are rounded up to whole bursts"),
    REQ("chip.dma.setup_cycles", NPU_PT_REAL, chip.dma.setup_cycles, NPU_PF_NONNEG,
        "fixed cycles per DMA instruction"),
    OPT("chip.dma.multicast", NPU_PT_INT, chip.dma.multicast, "1", NPU_PF_POSITIVE,
        "cores of a cluster that one GM read fills at once (Hopper TMA multicast); 1: none"),
    REQ("chip.l2.size", NPU_PT_SIZE, chip.l2.size_bytes, NPU_PF_POSITIVE, "L2 cache"),
    REQ("chip.l2.bandwidth", NPU_PT_BANDWIDTH, chip.l2.bw_bytes_per_s, NPU_PF_POSITIVE,
        "aggregate L2 bandwidth"),
    REQ("chip.l2.latency", NPU_PT_TIME, chip.l2.latency_s, NPU_PF_NONNEG, "L2 hit latency"),
    REQ("chip.hbm.size", NPU_PT_SIZE, chip.hbm.size_bytes, NPU_PF_POSITIVE, "HBM capacity"),
    REQ("chip.hbm.bandwidth", NPU_PT_BANDWIDTH, chip.hbm.bw_bytes_per_s, NPU_PF_POSITIVE,
        "aggregate HBM bandwidth"),
    REQ("chip.hbm.latency", NPU_PT_TIME, chip.hbm.latency_s, NPU_PF_NONNEG, "HBM access latency"),
    REQ("chip.launch_overhead", NPU_PT_TIME, chip.launch_overhead_s, NPU_PF_NONNEG,
        "kernel launch, host call to first instruction"),
    REQ("chip.stream_gap", NPU_PT_TIME, chip.stream_gap_s, NPU_PF_NONNEG,
        "gap between consecutive kernels of one stream when the host has queued them ahead "
        "(replaces launch_overhead inside a training step)"),
    OPT("chip.sync.scalar_cycles", NPU_PT_REAL, chip.sync.scalar_cycles, "1", NPU_PF_NONNEG,
        "cycles per scalar instruction"),
    OPT("chip.sync.flag_cycles", NPU_PT_REAL, chip.sync.flag_cycles, "1", NPU_PF_NONNEG,
        "cycles from set_flag to the waiting pipe of the same core"),
    REQ("chip.sync.cross_core", NPU_PT_TIME, chip.sync.cross_core_s, NPU_PF_NONNEG,
        "cross-core flag between a cube core and its vector cores"),
    REQ("chip.sync.all_core", NPU_PT_TIME, chip.sync.all_core_s, NPU_PF_NONNEG,
        "all-core barrier"),
    CALIB("chip.calib.cube", chip.calib.cube, "of the cube MAC rate"),
    RANGE("chip.calib.cube_fp8", NPU_PT_REAL, chip.calib.cube_fp8.value, "0", 0, 1,
          "achievable share of peak of the cube MAC rate with 8-bit float inputs (fp8, hif8, mxfp8); 0: as chip.calib.cube"),
    {"chip.calib.cube_fp8_source", NPU_PT_STRING, NPU_PARAM_OFF(chip.calib.cube_fp8.source),
     NPU_PARAM_SZ(chip.calib.cube_fp8.source), "uncalibrated: as chip.calib.cube", 0, 0, 0, NULL,
     "measurement the fraction comes from"},
    CALIB("chip.calib.vector", chip.calib.vector, "of the vector rate"),
    CALIB("chip.calib.hbm", chip.calib.hbm, "of HBM bandwidth"),
    CALIB("chip.calib.l2", chip.calib.l2, "of L2 bandwidth"),

    /* node */
    NPU_PARAM_STR("node.name", node.name, "", "name of the server"),
    REQ("node.devices", NPU_PT_INT, node.devices, NPU_PF_POSITIVE,
        "ranks per node (dies, when a package holds several)"),
    RANGE("node.dies_per_package", NPU_PT_INT, node.dies_per_package, "1", 1, 8,
          "dies per package; each die is its own rank"),
    OPT("node.d2d.bandwidth", NPU_PT_BANDWIDTH, node.d2d.bw_bytes_per_s, "0Bps", NPU_PF_NONNEG,
        "die-to-die link inside a package, one direction"),
    OPT("node.d2d.latency", NPU_PT_TIME, node.d2d.latency_s, "0s", NPU_PF_NONNEG,
        "die-to-die latency"),
    NPU_PARAM_ENUM("node.topology", node.topology, NULL, node_topo_names,
         "full_mesh: every package wired to every other; switch: packages meet in switches"),
    REQ("node.link.bandwidth", NPU_PT_BANDWIDTH, node.link.bw_bytes_per_s, NPU_PF_POSITIVE,
        "one intra-node link, one direction"),
    REQ("node.link.latency", NPU_PT_TIME, node.link.latency_s, NPU_PF_POSITIVE,
        "one intra-node hop"),
    REQ("node.link.ports", NPU_PT_INT, node.link.ports, NPU_PF_POSITIVE,
        "intra-node links per package"),
    CALIB("node.link.efficiency", node.link_efficiency, "of intra-node link bandwidth"),
    RANGE("node.link.p2p_fraction", NPU_PT_REAL, node.link_p2p_fraction, "0", 0, 1,
          "the fraction of node.link.efficiency that point-to-point transfers reach (sends, all-to-alls: NCCL runs "
          "them as p2p kernels, apart from its ring collectives); 0: as the collectives"),
    NPU_PARAM_STR("node.link.efficiency_curve", node.link_efficiency_curve, "",
                  "the fraction of node.link.efficiency (the links' capacity) a collective reaches over its size, "
                  "\"SIZE:FRACTION ...\" (bytes per transfer: S / ranks for all-reduce, all-gather, reduce-scatter, "
                  "all-to-all; S for a send), interpolated in log(size), held at the ends; \"\": 1 at every size"),
    OPT("node.ccl.step_overhead", NPU_PT_TIME, node.ccl.step_overhead_s, "1.5us", NPU_PF_NONNEG,
        "the collective library's fixed cost per algorithm step, before its transfer starts (HCCL's "
        "task overhead, NCCL's per-step latency)"),
    {"node.ccl.step_overhead_source", NPU_PT_STRING, NPU_PARAM_OFF(node.ccl.step_overhead_source),
     NPU_PARAM_SZ(node.ccl.step_overhead_source), "HCCL's task overhead, 1-2 us (shared/reference/hccl.md)", 0, 0, 0,
     NULL, "measurement the step overhead comes from"},
    OPT("node.ccl.reduce_bandwidth", NPU_PT_BANDWIDTH, node.ccl.reduce_bw_bytes_per_s, "483GBps", NPU_PF_NONNEG,
        "rate of the collective library's local reduction of received data, a pass after each step's transfer "
        "(HCCL: 483 GB/s, shared/reference/hccl.md); 0: the reduction is fused into the transfer (NCCL reduces in "
        "its kernels as data arrives)"),
    OPT("node.ccl.cores", NPU_PT_INT, node.ccl.cores, "0", NPU_PF_NONNEG,
        "cores (SMs) a collective of the library occupies for as long as it runs, when its group is inside a "
        "node (NCCL: one SM per channel); compute overlapped with it runs on the others. 0: none (HCCL moves "
        "data with its DMA engines)"),
    OPT("node.ccl.scaleout_cores", NPU_PT_INT, node.ccl.scaleout_cores, "0", NPU_PF_NONNEG,
        "the same for a collective whose group crosses nodes"),
    {"node.ccl.cores_source", NPU_PT_STRING, NPU_PARAM_OFF(node.ccl.cores_source), NPU_PARAM_SZ(node.ccl.cores_source),
     "not modelled", 0, 0, 0, NULL, "where the core counts of node.ccl come from"},
    OPT("node.host.dispatch", NPU_PT_TIME, node.host.dispatch_s, "0s", NPU_PF_NONNEG,
        "host time per kernel launched by an eager framework (Python, dispatcher, runtime launch): a "
        "stream whose kernels are shorter waits for the host; 0 leaves the host out"),
    OPT("node.host.graph_dispatch", NPU_PT_TIME, node.host.graph_dispatch_s, "0s", NPU_PF_NONNEG,
        "host time per kernel replayed from a captured graph (plan.graph)"),
    OPT("node.host.bandwidth", NPU_PT_BANDWIDTH, node.host.bandwidth_bytes_per_s, "0Bps", NPU_PF_NONNEG,
        "the link between a device and host memory, per device and direction (PCIe): what activation offload "
        "(plan.offload_layers) moves over; 0: not given (offload is refused)"),
    OPT("node.host.latency", NPU_PT_TIME, node.host.latency_s, "0s", NPU_PF_NONNEG,
        "a host-link transfer's fixed cost (DMA set-up)"),
    OPT("node.switch_ports", NPU_PT_INT, node.switch_ports, "0", NPU_PF_NONNEG,
        "ports of the node's switches together (topology switch)"),
    NPU_PARAM_BOOL("node.nvls", node.nvls, "false",
                   "the switches reduce and multicast (NVLink SHARP, NVSwitch 3rd generation): an all-reduce inside "
                   "the node may run in-switch (the nvls algorithm), as NCCL's NVLS does"),

    /* cluster */
    NPU_PARAM_STR("cluster.name", cluster.name, "", "name of the cluster"),
    REQ("cluster.nodes", NPU_PT_INT, cluster.nodes, NPU_PF_POSITIVE, "nodes (servers)"),
    NPU_PARAM_ENUM("cluster.scaleout.topology", cluster.scaleout.topology, NULL, scaleout_names,
         "scale-out network between nodes: none, fat_tree, rail_clos (rail-optimized)"),
    OPT("cluster.scaleout.nics_per_device", NPU_PT_INT, cluster.scaleout.nics_per_device, "1",
        NPU_PF_POSITIVE, "scale-out NICs per device"),
    REQ("cluster.scaleout.nic_bandwidth", NPU_PT_BANDWIDTH, cluster.scaleout.nic_bw_bytes_per_s,
        NPU_PF_POSITIVE, "one NIC, one direction"),
    REQ("cluster.scaleout.nic_latency", NPU_PT_TIME, cluster.scaleout.nic_latency_s,
        NPU_PF_POSITIVE, "NIC to NIC through the leaf switch"),
    OPT("cluster.scaleout.switch_latency", NPU_PT_TIME, cluster.scaleout.switch_latency_s,
        "0.5us", NPU_PF_NONNEG, "each further switch hop"),
    OPT("cluster.scaleout.switch_radix", NPU_PT_INT, cluster.scaleout.switch_radix, "64",
        NPU_PF_POSITIVE, "ports per switch"),
    RANGE("cluster.scaleout.tiers", NPU_PT_INT, cluster.scaleout.tiers, "2", 1, 3,
          "switch tiers"),
    RANGE("cluster.scaleout.oversubscription", NPU_PT_REAL, cluster.scaleout.oversubscription,
          "1.0", 1, 64, "leaf down:up bandwidth ratio"),
    CALIB("cluster.scaleout.efficiency", cluster.scaleout.efficiency, "of NIC bandwidth"),
    OPT("cluster.superpod.nodes", NPU_PT_INT, cluster.superpod.nodes, "0", NPU_PF_NONNEG,
        "nodes joined by one SuperPoD scale-up fabric; 0: none"),
    RANGE("cluster.superpod.tiers", NPU_PT_INT, cluster.superpod.tiers, "2", 1, 2,
          "switch tiers of the SuperPoD fabric"),
    OPT("cluster.superpod.bandwidth", NPU_PT_BANDWIDTH, cluster.superpod.bw_bytes_per_s, "0Bps",
        NPU_PF_NONNEG, "SuperPoD fabric per device, one direction"),
    OPT("cluster.superpod.latency", NPU_PT_TIME, cluster.superpod.latency_s, "0s",
        NPU_PF_NONNEG, "device to device across the SuperPoD fabric"),
    RANGE("cluster.superpod.oversubscription", NPU_PT_REAL, cluster.superpod.oversubscription,
          "1.0", 1, 64, "SuperPoD fabric down:up bandwidth ratio"),
    CALIB("cluster.superpod.efficiency", cluster.superpod.efficiency,
          "of SuperPoD fabric bandwidth"),
};

static const struct npu_section sections[] = {
    {"chip", true, "the accelerator: cores, buffers, DMA, L2, HBM"},
    {"node", false, "a server: devices and the links inside it"},
    {"cluster", false, "nodes and the networks between them"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

const struct npu_table *arch_table(void)
{
  return &table;
}
