/*
 * arch.h - the hardware description: chip, node (server) and cluster.
 *
 * Plain structs filled by the generic loader (common/cfg.h) from libconfig files and presets
 * (the .cfg files in arch/presets). Every value is SI (seconds, bytes, bytes/s, Hz) except rates that the
 * vendor publishes per clock cycle, which keep "per_cycle" in their names. Figures and their
 * public sources are in the preset files; docs/SCENARIOS.md lists every key.
 *
 * A description always has a chip. node and cluster are optional: a chip preset alone
 * describes one device with no links.
 */
#ifndef NPUSIM_ARCH_ARCH_H
#define NPUSIM_ARCH_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/cfg.h"
#include "common/diag.h"
#include "common/dtype.h"

#define ARCH_NAME_MAX 64
#define ARCH_SOURCE_MAX 256
#define ARCH_CURVE_MAX 24  /* knots of an efficiency curve */
#define ARCH_CURVE_TEXT_MAX 512

enum arch_org {
  ARCH_ORG_SPLIT,   /* separate cube (AIC) and vector (AIV) cores: 910B, 910C, 950 */
  ARCH_ORG_COUPLED, /* one core holds cube and vector units: 910A, GPUs (SM) */
};

enum arch_buf { ARCH_BUF_L1, ARCH_BUF_L0A, ARCH_BUF_L0B, ARCH_BUF_L0C, ARCH_BUF_UB,
                ARCH_BUF_BT, ARCH_BUF_FB, ARCH_BUF_COUNT };

/* Data paths of the DMA engines and FixPipe, per core. */
#define ARCH_PATH_MAP(XX)                                                \
  XX(GM_TO_L1, "gm_to_l1", "MTE2: GM -> L1 (with ND->NZ)")               \
  XX(GM_TO_L0A, "gm_to_l0a", "MTE2: GM -> L0A")                          \
  XX(GM_TO_L0B, "gm_to_l0b", "MTE2: GM -> L0B")                          \
  XX(GM_TO_UB, "gm_to_ub", "MTE2: GM -> UB")                             \
  XX(L1_TO_L0A, "l1_to_l0a", "MTE1: L1 -> L0A")                          \
  XX(L1_TO_L0B, "l1_to_l0b", "MTE1: L1 -> L0B")                          \
  XX(L1_TO_UB, "l1_to_ub", "L1 -> UB")                                   \
  XX(UB_TO_L1, "ub_to_l1", "UB -> L1")                                   \
  XX(UB_TO_L0A, "ub_to_l0a", "UB -> L0A (registers as the cube's A operand)") \
  XX(L0C_TO_GM, "l0c_to_gm", "FixPipe: L0C -> GM")                       \
  XX(L0C_TO_L1, "l0c_to_l1", "FixPipe: L0C -> L1")                       \
  XX(L0C_TO_UB, "l0c_to_ub", "FixPipe: L0C -> UB")                       \
  XX(UB_TO_GM, "ub_to_gm", "MTE3: UB -> GM")                             \
  XX(L1_TO_FB, "l1_to_fb", "FixPipe: L1 -> FixPipe buffer (quant params)") \
  XX(L1_TO_BT, "l1_to_bt", "MTE1: L1 -> BiasTable")

enum arch_path {
#define ARCH__PATH_ENUM(e, name, desc) ARCH_PATH_##e,
  ARCH_PATH_MAP(ARCH__PATH_ENUM)
#undef ARCH__PATH_ENUM
  ARCH_PATH_COUNT
};

struct arch_buffer {
  uint64_t size_bytes;  /* capacity per core */
  uint64_t align_bytes; /* address alignment */
};

struct arch_ub {
  int banks;                   /* UB banks */
  int bank_groups;             /* groups; 32-byte rows interleave across groups */
  uint64_t bank_bytes;         /* one bank; bank in group = address / (bank_bytes x groups) */
  int read_ports_per_group;    /* reads one group serves per cycle */
  double read_bytes_per_cycle; /* UB read port */
  double write_bytes_per_cycle;/* UB write port */
};

struct arch_calib {
  double value;                /* achievable share of peak, in (0, 1] */
  char source[ARCH_SOURCE_MAX];/* the measurement it comes from */
};

struct arch_chip {
  char name[ARCH_NAME_MAX];    /* preset name, e.g. "ascend-910b2" */
  char title[ARCH_NAME_MAX];   /* human name, e.g. "Ascend 910B2" */
  int org;                     /* enum arch_org */
  int aic_count;               /* cube cores (SMs on GPUs) */
  int aiv_count;               /* vector cores; == aic_count when coupled */
  double clock_hz;             /* core clock */
  struct {
    int fractal_m, fractal_n;  /* rows of A / columns of B per fractal (16) */
    int fractal_k_bytes;       /* bytes of K per fractal row: K0 = this / element size */
    int macs_per_cycle[NPU_DT_CUBE_COUNT]; /* per AIC per input dtype; 0 = unsupported */
  } cube;
  struct {
    double bytes_per_cycle;    /* per AIV, elementwise throughput */
    int block_bytes;           /* one block of a repeat (32 B) */
    int repeat_max;            /* repeats per instruction (255) */
    double flops_per_element;  /* FLOP per lane per cycle counted for peaks (1, or 2 for FMA) */
    double transcendental_cycles; /* cycles per repeat of exp/ln/rsqrt/rec */
  } vector;
  struct arch_buffer buf[ARCH_BUF_COUNT]; /* L1, L0A, L0B, L0C, UB, BiasTable, FixPipe buffer */
  struct arch_ub ub;
  struct {
    double gm_read_bytes_per_cycle;  /* a core's port for reads from GM (through L2) */
    double gm_write_bytes_per_cycle; /* a core's port for writes to GM */
    double path_bytes_per_cycle[ARCH_PATH_COUNT]; /* per path; 0 = path absent */
    uint64_t burst_bytes;      /* GM burst granularity: transfers round up to it */
    double setup_cycles;       /* fixed cost per DMA instruction */
    int multicast;             /* cores one GM read can fill at once (Hopper's TMA multicast
                                  across a thread-block cluster); 1: none */
  } dma;
  struct { uint64_t size_bytes; double bw_bytes_per_s; double latency_s; } l2;
  struct { uint64_t size_bytes; double bw_bytes_per_s; double latency_s; } hbm;
  double launch_overhead_s;    /* kernel launch, host to first instruction */
  double stream_gap_s;         /* between queued kernels of one stream */
  struct {
    double scalar_cycles;      /* scalar unit: cycles per scalar instruction */
    double flag_cycles;        /* set_flag to the waiting pipe, same core */
    double cross_core_s;       /* cross-core flag between an AIC and its AIVs */
    double all_core_s;         /* all-core barrier */
  } sync;
  struct { struct arch_calib cube, cube_fp8, vector, hbm, l2; } calib; /* cube_fp8 0: as cube */
};

enum arch_node_topo { ARCH_NODE_FULL_MESH, ARCH_NODE_SWITCH };

struct arch_node {
  char name[ARCH_NAME_MAX];
  int devices;                 /* ranks per node (dies when a package has several) */
  int dies_per_package;        /* 1, or 2 for 910C */
  struct { double bw_bytes_per_s, latency_s; } d2d; /* die-to-die inside a package (SIO) */
  int topology;                /* enum arch_node_topo */
  struct {
    double bw_bytes_per_s;     /* one link, one direction */
    double latency_s;          /* one hop */
    int ports;                 /* intra-node links per package */
  } link;
  int switch_ports;            /* total ports of the node's switches (topology switch) */
  bool nvls;                   /* the switches reduce and multicast (NVLink SHARP): all-reduce in-switch */
  struct arch_calib link_efficiency;
  /* node.link.efficiency_curve: the fraction of link_efficiency (the platform's link capacity)
   * a collective reaches over its size, "SIZE:FRACTION" pairs (sizes increasing, fractions in
   * (0, 1]); "" for none. Parsed into link_curve by arch_finish; arch_link_share reads it. */
  char link_efficiency_curve[ARCH_CURVE_TEXT_MAX];
  /* node.link.p2p_fraction: the fraction of link_efficiency that point-to-point transfers reach
   * (sends, all-to-alls: NCCL runs them as p2p kernels on fewer channels); 0: as collectives */
  double link_p2p_fraction;
  struct arch_curve {
    int n;                     /* 0: no curve, every size gets link_efficiency */
    double bytes[ARCH_CURVE_MAX], share[ARCH_CURVE_MAX]; /* share: a fraction in (0, 1] */
  } link_curve;
  struct {
    double step_overhead_s;    /* the collective library's fixed cost per algorithm step */
    double reduce_bw_bytes_per_s; /* its local reduction pass; 0: fused into the transfers */
    char step_overhead_source[ARCH_SOURCE_MAX];
    int cores;                 /* cores (SMs) a collective inside the node occupies while it runs */
    int scaleout_cores;        /* ... and one that crosses nodes; 0: it takes none */
    char cores_source[ARCH_SOURCE_MAX];
  } ccl;
  struct {
    double dispatch_s;         /* host time per kernel an eager framework launches; 0: not modelled */
    double graph_dispatch_s;   /* the same for a kernel replayed from a captured graph */
    double bandwidth_bytes_per_s; /* host link per device, one direction (PCIe); 0: not given */
    double latency_s;          /* its per-transfer latency */
  } host;
};

enum arch_scaleout_topo { ARCH_SCALEOUT_NONE, ARCH_SCALEOUT_FAT_TREE, ARCH_SCALEOUT_RAIL_CLOS };

struct arch_cluster {
  char name[ARCH_NAME_MAX];
  int nodes;
  struct {
    int topology;              /* enum arch_scaleout_topo */
    int nics_per_device;
    double nic_bw_bytes_per_s; /* one NIC, one direction */
    double nic_latency_s;      /* NIC to NIC through one switch */
    double switch_latency_s;   /* each further switch hop */
    int switch_radix;          /* ports per switch */
    int tiers;                 /* switch tiers */
    double oversubscription;   /* down:up bandwidth ratio at the leaf (>= 1) */
    struct arch_calib efficiency;
  } scaleout;
  struct {
    int nodes;                 /* nodes per SuperPoD (0: no SuperPoD fabric) */
    int tiers;                 /* switch tiers of the fabric */
    double bw_bytes_per_s;     /* per device, one direction */
    double latency_s;          /* device to device across the fabric */
    double oversubscription;
    struct arch_calib efficiency;
  } superpod;
};

struct arch_system {
  struct arch_chip chip;
  struct arch_node node;
  struct arch_cluster cluster;
  bool has_node;    /* node section given */
  bool has_cluster; /* cluster section given */
};

/* The parameter table of a system ("chip.*", "node.*", "cluster.*"). */
const struct npu_table *arch_table(void);

/*
 * Register the arch table with cfg, values landing in sys, and add the preset directory.
 * Zeroes sys first.
 */
void arch_register(struct npu_cfg *cfg, struct arch_system *sys);

/*
 * After loading: record which sections are present and check cross-field consistency
 * (fractals fit the buffers, core organisation, the node wires its devices, the cluster wires
 * its nodes). Returns 0 or NPU_ECONFIG with diag naming the key's file:line.
 */
int arch_finish(struct npu_cfg *cfg, struct arch_system *sys, struct npu_diag *diag);

/*
 * The fraction of node.link.efficiency (the link capacity of the platform) that a transfer of a
 * collective whose transfers are key_bytes each reaches (ic_coll_step_bytes: S / p for the
 * ring-like collectives, S for a send): 1 without a curve; with one, the curve's fraction
 * interpolated linearly in log(size) between its knots and held at the end values beyond them.
 * p2p (sends, all-to-alls): node.link.p2p_fraction where it is set. The achievable share of the
 * link is node.link.efficiency times this.
 */
double arch_link_fraction(const struct arch_node *n, double key_bytes, bool p2p);

/*
 * Parse a curve "SIZE:FRACTION, SIZE:FRACTION ..." (blanks or commas between pairs) into *out:
 * sizes strictly increasing, fractions in (0, 1]. 0, or NPU_EINVAL with the reason in why.
 */
int arch_curve_parse(const char *text, struct arch_curve *out, char *why, size_t nwhy);

/* Where presets live: $NPUSIM_PRESET_DIR if set, else the data root's arch/presets. */
const char *arch_preset_dir(void);

/*
 * The data root: the folder holding arch/presets, scenarios/models, scenarios/validation and
 * calibration/data, as the source tree does. $NPUSIM_DATA_DIR if set; else, for an installed
 * npusim, PREFIX/share/npusim beside the executable's PREFIX/bin (where `make install` puts
 * them); else the source tree the executable was built from. Also the root display paths are
 * given relative to.
 */
const char *arch_source_root(void);

/* Element size in bits -> K0 of a fractal for that dtype (elements). */
int arch_fractal_k(const struct arch_chip *chip, enum npu_dtype t);

/*
 * A 64-bit fingerprint of every chip parameter (not node or cluster): kernels costed on one
 * chip description are valid exactly for descriptions with the same fingerprint.
 */
uint64_t arch_chip_fingerprint(const struct arch_system *sys);
/* The same of every node parameter (0 without a node): with the chip's, what an operator that
 * runs on several devices of the node (MC2) is costed on. */
uint64_t arch_node_fingerprint(const struct arch_system *sys);

/* Names of the DMA paths, "gm_to_l1", ...; and of the buffers, "l1", ... */
const char *arch_path_name(enum arch_path p);
const char *arch_buf_name(enum arch_buf b);

/* The 8-bit float cube input types (fp8, hif8, mxfp8): those chip.calib.cube_fp8 applies to. */
static inline bool arch_dtype_f8(int t)
{
  return t == NPU_DT_FP8_E4M3 || t == NPU_DT_FP8_E5M2 || t == NPU_DT_HIF8 || t == NPU_DT_MXFP8;
}

/* The achievable share of the cube MAC rate for inputs of type t: chip.calib.cube_fp8 for the
 * 8-bit float types where it is set, else chip.calib.cube. */
static inline double arch_cube_share(const struct arch_chip *c, int t)
{
  return arch_dtype_f8(t) && c->calib.cube_fp8.value > 0 ? c->calib.cube_fp8.value : c->calib.cube.value;
}

#endif
