/*
 * cmd_calibrate.c - `npusim calibrate PRESET [--data DIR] [--knob KEY] [--fidelity F] [--write]
 * [--json] [--set KEY=VALUE]...`: fit the preset's calibration knobs to the microbenchmark data
 * files (calibrate/calibrate.h), print each fitted value with every point's residual, and with
 * --write put the values and their provenance into the preset files.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "calibrate/calibrate.h"
#include "cli/cli.h"
#include "common/cfg.h"
#include "common/err.h"
#include "common/json.h"
#include "cores/kernel.h"
#include "interconnect/coll.h"

static const char usage[] =
    "usage: npusim calibrate PRESET|FILE [--data DIR] [--knob KEY] [--fidelity analytic|event]\n"
    "                        [--write] [--json] [--set KEY=VALUE]...\n"
    "\n"
    "Fit the calibration knobs of a hardware preset (chip.calib.cube from GEMM throughput,\n"
    "chip.calib.cube_fp8 from the 8-bit float GEMMs, chip.calib.hbm from streaming kernels,\n"
    "node.link.efficiency with node.ccl.step_overhead (jointly) and\n"
    "cluster.scaleout.efficiency from collective bus bandwidth over sizes) to\n"
    "the microbenchmark measurements in the data files (calibration/data/*.csv, each row with\n"
    "its source), by running npusim's model of every point. Prints each knob's fitted value,\n"
    "the preset's current one, and every point's measured and modelled figure with the\n"
    "residual. A knob is a share of a peak, at most 1: when the model is slower than the data\n"
    "even at 1, the fit says so (a modelling gap) instead of exceeding the peak. A GEMM row\n"
    "whose stat is the best of a search (\"peak of ...\", \"best of ...\") is listed, not fitted:\n"
    "a maximum over many short runs is biased upward. Only microbenchmarks feed this, never\n"
    "training results.\n"
    "\n"
    "  --data DIR     data files (default: calibration/data of the source tree)\n"
    "  --knob KEY     fit this knob only\n"
    "  --fidelity F   kernel fidelity of the GEMM points (default analytic, as the training\n"
    "                 replay runs kernels); collectives run at bulk fidelity, as in the replay\n"
    "  --write        write the fitted values, with their provenance, into the preset files\n"
    "                 (the file that sets each knob, or that sets its group)\n"
    "  --json         .knobs[] with .key, .points, .value, .before, .at_bound, .rms,\n"
    "                 .not_identifiable, .residuals[] (.where, .measured_s, .model_s, .residual);\n"
    "                 node.link.efficiency fitted as a curve: .curve, .scalar_value, .scalar_rms, .p2p\n"
    "                 a time knob's values in seconds\n";

struct opts {
  const char *spec, *data, *knob, *fidelity;
  bool write, json;
  struct cli_sets sets;
};

static int parse(int argc, char **argv, struct opts *o, struct npu_diag *d)
{
  for (int i = 1; i < argc; i++) {
    int t = cli_take_set(argc, argv, &i, &o->sets, d);
    if (t < 0) return NPU_EINVAL;
    if (t > 0) continue;
    const char **val = !strcmp(argv[i], "--data")       ? &o->data
                       : !strcmp(argv[i], "--knob")     ? &o->knob
                       : !strcmp(argv[i], "--fidelity") ? &o->fidelity
                                                        : NULL;
    if (val) {
      if (i + 1 >= argc) return npu_diag_set(d, "command line", 0, argv[i], "needs a value"), NPU_EINVAL;
      *val = argv[++i];
    } else if (!strcmp(argv[i], "--write")) {
      o->write = true;
    } else if (!strcmp(argv[i], "--json")) {
      o->json = true;
    } else if (argv[i][0] != '-' && !o->spec) {
      o->spec = argv[i];
    } else {
      return cli_bad_arg(d, "calibrate", argv[i]);
    }
  }
  if (!o->spec) return npu_diag_set(d, "command line", 0, NULL, "calibrate needs a preset or a file"), NPU_EINVAL;
  return 0;
}

/* "gemm 8192x8192x8192 bf16" / "allreduce 1 GiB x 8 ranks" */
static void point_label(const struct cal_point *p, char *buf, size_t n)
{
  if (p->kind == CAL_GEMM) snprintf(buf, n, "gemm %ldx%ldx%ld %s", p->m, p->n, p->k, p->dtype);
  else if (p->kind == CAL_HBM) snprintf(buf, n, "stream %.40s", p->kernel);
  else snprintf(buf, n, "%s %.4g B, %d ranks on %d node%s", p->op, p->bytes, p->ranks, p->nodes, p->nodes > 1 ? "s" : "");
}

/* The measured figure and the model's, in the file's unit. */
static double model_figure(const struct cal_point *p, double model_s)
{
  return p->measured * p->measured_s / model_s; /* throughputs scale as 1 / time */
}

/* A knob's value as text: a share as a number, a time in microseconds. */
static void knob_text(const struct cal_knob *k, double v, char *buf, size_t n)
{
  if (k->time) snprintf(buf, n, "%.4gus", v * 1e6);
  else snprintf(buf, n, "%.4g", v);
}

static void print_text(struct npu_buf *out, const struct cal_fit *f, const struct cal_set *set)
{
  const struct cal_knob *k = f->knob;
  if (f->unmodelled)
    npu_buf_printf(out, "%s: %d points left out: npusim's model gives them no time (a defect to fix): %s\n", k->key,
                   f->unmodelled, f->unmodelled_at);
  if (f->maxima)
    npu_buf_printf(out,
                   "%s: %d points left out: the best of a search over shapes or trials, biased upward (the most "
                   "favourable of many short runs), not what a kernel sustains: %s\n",
                   k->key, f->maxima, f->maxima_at);
  if (f->unbound)
    npu_buf_printf(out,
                   "%s: %d points left out: the cube does not bound them in the model (busy under 90%% of the "
                   "kernel at the knob's best), so the knob cannot explain them: %s\n",
                   k->key, f->unbound, f->unbound_at);
  char now[32], before[32];
  knob_text(k, f->value, now, sizeof now);
  knob_text(k, f->before, before, sizeof before);
  if (f->not_identifiable) {
    npu_buf_printf(out,
                   "%s: the points do not separate it from the link bandwidth (none is mostly per-step cost, or "
                   "none mostly bandwidth): left at %s\n\n",
                   k->key, before);
    return;
  }
  if (!f->npoints) {
    npu_buf_printf(out, "%s: no points in the data for this preset (left at %s)\n\n", k->key, before);
    return;
  }
  npu_buf_printf(out, "%s = %s   (preset: %s; %d points, rms residual %.1f%%, worst %.1f%%)\n", k->key, now, before,
                 f->npoints, 100 * f->rms, 100 * f->max_abs);
  npu_buf_printf(out, "  %s\n", k->what);
  if (f->at_bound && f->value >= k->hi && !k->time)
    npu_buf_printf(out, "  the model is slower than the measurements even at %.4g: a modelling gap, not a knob\n", k->hi);
  if (f->curve.n) {
    char one[32];
    knob_text(k, f->scalar_value, one, sizeof one);
    npu_buf_printf(out,
                   "  a curve over transfer size (one number, %s, leaves rms %.1f%%): the value above is its plateau, "
                   "the links' capacity, and the curve is in fractions of it\n  node.link.efficiency_curve = \"%s\"\n",
                   one, 100 * f->scalar_rms, f->curve_text);
    if (f->p2p_points)
      npu_buf_printf(out, "  node.link.p2p_fraction = %.4g   (sends and all-to-alls: the median of %d points, of the plateau)\n", f->p2p,
                     f->p2p_points);
  } else if (f->trend[0]) npu_buf_printf(out, "  %s\n", f->trend);
  npu_buf_printf(out, "  %-46s %12s %12s %9s  %s\n", "point", "measured", "model", "residual", "data");
  for (int i = 0; i < f->npoints; i++) {
    const struct cal_point *p = &set->p[f->res[i].point];
    char label[128];
    point_label(p, label, sizeof label);
    npu_buf_printf(out, "  %-46s %7.1f %-4s %7.1f %-4s %+8.1f%%  %s\n", label, p->measured,
                   p->kind == CAL_GEMM ? "TF/s" : "GB/s", model_figure(p, f->res[i].model_s),
                   p->kind == CAL_GEMM ? "TF/s" : "GB/s", 100 * f->res[i].residual, p->where);
  }
  npu_buf_printf(out, "\n");
}

static void print_json(struct npu_json *j, const struct cal_fit *f, const struct cal_set *set)
{
  npu_json_object_begin(j);
  npu_json_key(j, "key");
  npu_json_string(j, f->knob->key);
  npu_json_key(j, "points");
  npu_json_number(j, f->npoints);
  npu_json_key(j, "value");
  npu_json_number(j, f->value);
  npu_json_key(j, "before");
  npu_json_number(j, f->before);
  npu_json_key(j, "at_bound");
  npu_json_bool(j, f->at_bound);
  npu_json_key(j, "not_identifiable");
  npu_json_bool(j, f->not_identifiable);
  npu_json_key(j, "rms");
  npu_json_number(j, f->rms);
  if (f->curve.n) {
    npu_json_key(j, "curve");
    npu_json_string(j, f->curve_text);
    npu_json_key(j, "scalar_value");
    npu_json_number(j, f->scalar_value);
    npu_json_key(j, "scalar_rms");
    npu_json_number(j, f->scalar_rms);
    npu_json_key(j, "p2p");
    npu_json_number(j, f->p2p);
  }
  npu_json_key(j, "residuals");
  npu_json_array_begin(j);
  for (int i = 0; i < f->npoints; i++) {
    const struct cal_point *p = &set->p[f->res[i].point];
    npu_json_object_begin(j);
    npu_json_key(j, "where");
    npu_json_string(j, p->where);
    npu_json_key(j, "measured_s");
    npu_json_number(j, p->measured_s);
    npu_json_key(j, "model_s");
    npu_json_number(j, f->res[i].model_s);
    npu_json_key(j, "residual");
    npu_json_number(j, f->res[i].residual);
    npu_json_object_end(j);
  }
  npu_json_array_end(j);
  npu_json_object_end(j);
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *d)
{
  struct opts o = {0};
  int rc = parse(argc, argv, &o, d);
  if (rc) return rc;
  struct cal_opts co = {.kernel_fidelity = CORE_FIDELITY_ANALYTIC, .coll_fidelity = IC_FIDELITY_BULK};
  if (o.fidelity) {
    if (!strcmp(o.fidelity, "event")) co.kernel_fidelity = CORE_FIDELITY_EVENT;
    else if (strcmp(o.fidelity, "analytic"))
      return npu_diag_set(d, "command line", 0, "--fidelity", "expected analytic or event, got '%s'", o.fidelity),
             NPU_EINVAL;
  }
  int nk;
  const struct cal_knob *knobs = cal_knobs(&nk);
  if (o.knob) {
    bool found = false;
    for (int i = 0; i < nk; i++) found |= !strcmp(knobs[i].key, o.knob);
    if (!found) return npu_diag_set(d, "command line", 0, "--knob", "'%s' is not a calibrated knob", o.knob), NPU_EINVAL;
  }
  struct npu_cfg *cfg;
  struct arch_system sys;
  rc = cli_load_system(&cfg, &sys, o.spec, &o.sets, d);
  char data[1100];
  if (o.data) snprintf(data, sizeof data, "%s", o.data);
  else snprintf(data, sizeof data, "%s/calibration/data", arch_source_root());
  /* the system's points, and its chip's */
  const char *name = strrchr(o.spec, '/') ? NULL : o.spec;
  const char *archs[] = {sys.chip.name, sys.node.name[0] ? sys.node.name : sys.chip.name, name, NULL};
  struct cal_set set = {0};
  if (!rc) rc = cal_points_load(&set, data, archs, d);
  struct npu_json j;
  if (!rc && o.json) {
    npu_json_init(&j, out);
    npu_json_object_begin(&j);
    npu_json_key(&j, "preset");
    npu_json_string(&j, o.spec);
    npu_json_key(&j, "knobs");
    npu_json_array_begin(&j);
  } else if (!rc) {
    npu_buf_printf(out, "calibrating %s (chip %s) against %d measured points (GEMMs at %s fidelity, collectives at "
                        "bulk fidelity)\n\n",
                   o.spec, sys.chip.name, set.n, co.kernel_fidelity == CORE_FIDELITY_EVENT ? "event" : "analytic");
    if (set.skipped) npu_buf_printf(out, "%d rows skipped (last: %s)\n\n", set.skipped, set.skip_why);
  }
  for (int i = 0; !rc && i < nk; i++) {
    if (o.knob && strcmp(o.knob, knobs[i].key)) continue;
    struct cal_fit f;
    rc = cal_fit_knob(&f, &knobs[i], &set, &sys, &co, d);
    if (rc) break;
    if (o.json) print_json(&j, &f, &set);
    else print_text(out, &f, &set);
    if (o.write && f.npoints) {
      char prov[ARCH_SOURCE_MAX], file[1100];
      cal_provenance(&f, &set, prov, sizeof prov);
      /* a chip knob belongs to the file that names the chip, a system knob to the preset
       * calibrated: never to a preset either inherits from */
      const struct npu_origin *chip = npu_cfg_origin(cfg, "chip.name");
      const char *own = knobs[i].chip_level && chip && chip->kind == NPU_ORIGIN_FILE ? chip->file : NULL;
      if (!own) own = npu_cfg_find_spec(cfg, o.spec);
      rc = cal_write_knob(cfg, &knobs[i], f.value, prov, own, file, sizeof file, d);
      if (!rc && !o.json) npu_buf_printf(out, "  written: %s = %.4g in %s\n\n", knobs[i].key, f.value, file);
      /* the curve beside its plateau (sharing its _source); a fit without one clears the preset's */
      const struct cal_knob ck = {.key = "node.link.efficiency_curve", .kind = CAL_COLLECTIVE};
      bool has_curve = !strcmp(knobs[i].key, "node.link.efficiency") && (f.curve.n || sys.node.link_curve.n);
      if (!rc && has_curve) rc = cal_write_text(cfg, &ck, f.curve_text, own, file, sizeof file, d);
      if (!rc && has_curve && !o.json) npu_buf_printf(out, "  written: %s = \"%s\" in %s\n\n", ck.key, f.curve_text, file);
      const struct cal_knob pk = {.key = "node.link.p2p_fraction", .kind = CAL_COLLECTIVE};
      bool has_p2p = !strcmp(knobs[i].key, "node.link.efficiency") && (f.curve.n || sys.node.link_p2p_fraction > 0);
      if (!rc && has_p2p) rc = cal_write_knob(cfg, &pk, f.p2p, "", own, file, sizeof file, d);
      if (!rc && has_p2p && !o.json) npu_buf_printf(out, "  written: %s = %.4g in %s\n\n", pk.key, f.p2p, file);
    }
    cal_fit_release(&f);
  }
  if (!rc && o.json) {
    npu_json_array_end(&j);
    npu_json_object_end(&j);
    npu_json_finish(&j);
  }
  cal_set_release(&set);
  free(o.sets.items);
  npu_cfg_destroy(cfg);
  return rc;
}

const struct npu_cmd npu_cmd_calibrate = {
    .name = "calibrate",
    .summary = "fit a preset's calibration knobs to microbenchmark data, with residuals",
    .usage = usage,
    .run = run};
