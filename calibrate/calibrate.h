/*
 * calibrate.h - fitting an architecture's calibration knobs to microbenchmark measurements.
 *
 * A knob (chip.calib.cube, node.link.efficiency, ...) is an achievable share of a peak, kept in
 * an architecture preset with the measurement it comes from. `npusim calibrate` fits each knob
 * to the points of a microbenchmark data file (calibration/data/ (one CSV per kind): GEMM throughput over
 * shapes, collective bus bandwidth over sizes, ...): it runs npusim's own model of every point
 * at the knob's candidate values and chooses the value that minimises the squared log error of
 * the predicted times, within the knob's range (a fraction of peak is at most 1: a model that is
 * slower than the measurement even at 1 has a modelling gap, reported as such and never hidden
 * by a factor above 1). It prints the fitted value with each point's residual, and with
 * --write puts the value and its provenance into the preset file that sets it. Knobs are never
 * fitted to end-to-end training or RL results: only the data files feed this.
 *
 *   struct cal_set set;
 *   cal_points_load(&set, data_dir, "nvidia-a100-80gb", "dgx-a100", diag);   rows of these archs
 *   cal_fit(&fit, &knobs[i], &set, &sys, &opts, diag);                          one knob
 */
#ifndef NPUSIM_CALIBRATE_CALIBRATE_H
#define NPUSIM_CALIBRATE_CALIBRATE_H

#include <stdbool.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "common/strutil.h"

/* What a point measures. */
enum cal_kind {
  CAL_GEMM,       /* gemm.csv: m, n, k, dtype, tflops */
  CAL_COLLECTIVE, /* collective.csv: op, size_bytes, ranks, nodes, time_us | algbw_gbps | busbw_gbps */
  CAL_HBM,        /* hbm.csv: kernel, gbps, traffic_per_counted_byte (a streaming kernel's bandwidth) */
  CAL_KIND_COUNT
};

/* One measured point, as read from a data file. */
struct cal_point {
  enum cal_kind kind;
  char arch[64];        /* the preset it was measured on */
  char where[1200];     /* "calibration/data/gemm.csv:4" */
  char source[512];
  double measured_s;    /* the measured time of one execution (from throughput where given so) */
  double measured;      /* the value as the file gives it (TFLOP/s, GB/s) */
  /* CAL_GEMM */
  long m, n, k;
  char dtype[16];
  bool maximum;         /* the best of a search over shapes or trials (gemm.csv's stat "peak of
                           ..." or "best of ..."): shown, never fitted (cal_fit_knob) */
  /* CAL_HBM: the kernel's name; measured is its total traffic in GB/s, and measured_s the time
   * of one GB of it */
  char kernel[128];
  /* CAL_COLLECTIVE */
  char op[32];
  double bytes;         /* per rank, nccl-tests convention */
  int ranks, nodes;
};

struct cal_set {
  struct cal_point *p;
  int n, cap;
  int skipped;          /* rows of these archs that npusim cannot model */
  char skip_why[1400];  /* the last one's reason */
};

/*
 * Read every data file of dir (gemm.csv, collective.csv; a missing file has no points) and keep
 * the rows whose arch is one of archs (NULL-terminated). 0, or NPU_EIO / NPU_ECONFIG with diag
 * naming file:line and the column.
 */
int cal_points_load(struct cal_set *set, const char *dir, const char *const *archs, struct npu_diag *diag);
void cal_set_release(struct cal_set *set);

/* How the model is run for the points. */
struct cal_opts {
  int kernel_fidelity;  /* enum core_fidelity: the training replay's default is analytic */
  int coll_fidelity;    /* enum ic_fidelity: the replay's in-situ collectives are bulk */
};

/* A knob: where it lives and which points it is fitted to. */
struct cal_knob {
  const char *key;            /* "chip.calib.cube" */
  const char *source_key;     /* "chip.calib.cube_source" */
  enum cal_kind kind;         /* the points it is fitted to */
  bool chip_level;            /* points of the chip's preset (else of the system's) */
  int min_nodes, max_nodes;   /* collective points: the node counts it explains */
  double lo, hi;              /* its range */
  const char *what;           /* one line */
  bool time;                  /* a time in seconds (written with a unit), not a share */
  bool fp8;                   /* GEMM knobs: fitted to the 8-bit float points (else to the others) */
};

/* The knobs npusim fits, in print order; *n receives their count. */
const struct cal_knob *cal_knobs(int *n);

/* One point's outcome at the fitted value. */
struct cal_residual {
  int point;                  /* index into the set */
  double model_s;             /* npusim's time at the fitted value */
  double residual;            /* of the measured figure (a throughput): model / measured - 1, so
                                 < 0 is slower than measured, as validation errors read */
};

struct cal_fit {
  const struct cal_knob *knob;
  int npoints;
  double value;               /* fitted */
  double before;              /* the preset's value */
  bool at_bound;              /* the best value is the range's end: the model cannot reach the data */
  double rms, max_abs;        /* of the residuals (log-free, relative) */
  struct cal_residual *res;   /* npoints */
  char trend[256];            /* "" or a sentence: residuals that change with size (a curve is needed) */
  int unmodelled;             /* points the model gave no time for (left out of the fit) */
  int unbound;                /* GEMM points the cube does not bound in the model (left out) */
  char unbound_at[1024];      /* their data lines and cube shares */
  char unmodelled_at[1024];   /* their data lines */
  int maxima;                 /* GEMM points that are the best of a search (left out, shown) */
  char maxima_at[1024];       /* their data lines */
  bool not_identifiable;      /* step overhead: the points do not tell it from the link (left as is) */
  /* node.link.efficiency over transfer size, where the points are a curve over sizes at one rank
   * count: value is then the curve's plateau (the links' capacity in the platform), curve holds
   * fractions of it (node.link.efficiency_curve), res[] are the curve's residuals; scalar_value
   * and scalar_rms are the one-number fit's */
  struct arch_curve curve;    /* n == 0: no curve */
  char curve_text[ARCH_CURVE_TEXT_MAX];
  double scalar_value, scalar_rms;
  double p2p;                 /* node.link.p2p_fraction with the curve (0: no p2p points) */
  int p2p_points;
};

/*
 * Fit knob k on sys (a copy is modified) to the points of set that it explains. A knob with no
 * points gets npoints 0 and is left as it is. 0, or an npu_err with diag (a point the model
 * cannot run: the message names its data file line).
 */
int cal_fit_knob(struct cal_fit *out, const struct cal_knob *k, const struct cal_set *set,
                 const struct arch_system *sys, const struct cal_opts *opts, struct npu_diag *diag);
void cal_fit_release(struct cal_fit *f);

/*
 * The value that minimises sum_i (log t_i(x))^2 over [lo, hi], where eval(x, ctx, r) fills the
 * n log-ratios r (model over measured) at x: golden-section search to 1e-5 of the range. 0 or
 * eval's error.
 */
int cal_minimise(double lo, double hi, int n, int (*eval)(double x, void *ctx, double *r), void *ctx, double *best);

/*
 * The provenance of a fit, for a preset's `_source` string (n is at most ARCH_SOURCE_MAX): the
 * points by data file and line ranges ("calibration/data/gemm.csv:7-10"), the residual, and as
 * many of the points' sources as fit, cut with "..." when they do not. No double quotes.
 */
void cal_provenance(const struct cal_fit *f, const struct cal_set *set, char *buf, size_t n);

/*
 * Put value and its provenance into own, the file of the preset the knob belongs to (NULL: any
 * file): where own sets key, there; else next to a key of its group that own sets. A value own
 * inherits belongs to another preset and is never edited (a fit for the H100 must not rewrite
 * the A100 it inherits from). *file receives the edited file's path. 0 or NPU_EIO / NPU_ECONFIG.
 */
struct npu_cfg;
int cal_write_knob(const struct npu_cfg *cfg, const struct cal_knob *k, double value, const char *provenance,
                   const char *own, char *file, size_t nfile, struct npu_diag *diag);

/* The same for a knob written as a string (node.link.efficiency_curve), without a _source of its
 * own (k->source_key NULL: its provenance is its group's). */
int cal_write_text(const struct npu_cfg *cfg, const struct cal_knob *k, const char *text, const char *own, char *file,
                   size_t nfile, struct npu_diag *diag);

#endif
