/*
 * cmd_collective.c - `npusim collective`: simulate one collective (or a size sweep) on a
 * cluster built from a hardware description and print time, algbw and busbw as nccl-tests and
 * hccl_test do (interconnect/coll.h has the conventions).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch/arch.h"
#include "cli/cli.h"
#include "common/cfg.h"
#include "common/err.h"
#include "common/json.h"
#include "common/units.h"
#include "interconnect/run.h"
#include "micro/micro.h"

static const char usage[] =
    "usage: npusim collective --op OP --bytes SIZE[:MAX] --arch NAME|FILE\n"
    "                         [--ranks N | --comm LIST] [--algo ALGO] [--fidelity step|bulk]\n"
    "                         [--root R] [--buffer SIZE] [--set KEY=VALUE]... [--json]\n"
    "\n"
    "Simulate a collective on the cluster of a hardware description (a preset such as\n"
    "atlas-800t-a2, atlas-a3-superpod, dgx-a100, selene, or a .cfg file) and print its time,\n"
    "algbw = S / time and busbw = algbw x factor, as nccl-tests and hccl_test report them.\n"
    "\n"
    "options:\n"
    "  --op OP          allreduce, reducescatter, allgather, alltoall, alltoallv, broadcast,\n"
    "                   reduce, sendrecv\n"
    "  --bytes SIZE     S per rank (1GiB, 64MB or plain bytes), nccl-tests convention\n"
    "                   (allgather: the gathered output; reducescatter: the input; alltoall:\n"
    "                   all a rank sends); MIN:MAX sweeps MIN, 2 MIN, ... up to MAX (1KiB:4GiB)\n"
    "  --arch SPEC      preset name or description file\n"
    "  --ranks N        the communicator is ranks 0..N-1 (default: every device of the system);\n"
    "                   ranks are dies, rank r on node r / node.devices\n"
    "  --comm LIST      the communicator's ranks, e.g. 0,8,16,24 or 0-3,8-11\n"
    "  --algo ALGO      auto (HCCL-like selection, default), ring, mesh, mesh(one-shot) (an\n"
    "                   AllReduce sending whole vectors), rhd, nhr, pairwise, hierarchical,\n"
    "                   hierarchical(INTRA+INTER) (INTRA mesh or ring inside servers, INTER\n"
    "                   ring, nhr or rhd across them, pairwise for all-to-all), pipeline,\n"
    "                   pipeline(mesh+ring), direct (sendrecv), nvls: every name the table's\n"
    "                   algorithm column prints\n"
    "  --fidelity F     step (every algorithm step a flow; default up to 512 ranks) or bulk\n"
    "                   (one flow per rank and link class per phase; default above)\n"
    "  --root R         root of broadcast / reduce, a position in the communicator (default 0)\n"
    "  --buffer SIZE    communicator buffer; larger payloads loop (default 200MB, HCCL's)\n"
    "  --dtype T        element type for the count column (nccl-tests -d): int8, uint8, int32,\n"
    "                   uint32, int64, uint64, half, float (default), double, bfloat16\n"
    "  --set KEY=VALUE  override one value of the description; repeatable\n"
    "  --json           print JSON: one size gives .time_s, .algbw_bytes_per_s,\n"
    "                   .busbw_bytes_per_s, .algorithm, ...; a sweep gives them in .results[]\n"
    "\n"
    "alltoallv sends 2 S/p x (1 + (i + j) mod p) / (p + 1) from rank i to rank j: uneven pairs,\n"
    "S from every rank in all. Bad input exits with status 2 and a message naming the option.\n";

struct opts {
  const char *op, *bytes, *arch, *ranks, *comm, *algo, *fidelity, *root, *buffer, *dtype;
  bool json;
  struct cli_sets sets;
};

/* "--name VALUE" or "--name=VALUE": 1 and *val set, 0 if argv[*i] is not this option, -1 if the
 * value is missing. */
static int take(int argc, char **argv, int *i, const char *name, const char **val,
                struct npu_diag *d)
{
  size_t n = strlen(name);
  const char *a = argv[*i];
  if (strncmp(a, name, n) != 0) return 0;
  if (a[n] == '=') {
    *val = a + n + 1;
    return 1;
  }
  if (a[n] != '\0') return 0;
  if (*i + 1 >= argc) {
    npu_diag_set(d, "command line", 0, name, "needs a value (see 'npusim help collective')");
    return -1;
  }
  *val = argv[++*i];
  return 1;
}

static int missing(struct npu_diag *d, const char *opt, const char *msg)
{
  return npu_diag_set(d, "command line", 0, opt, "%s", msg), NPU_EINVAL;
}

static int parse_args(int argc, char **argv, struct opts *o, struct npu_diag *d)
{
  static const char *const names[] = {"--op", "--bytes", "--arch", "--ranks", "--comm",
                                      "--algo", "--fidelity", "--root", "--buffer", "--dtype"};
  const char **slots[] = {&o->op, &o->bytes, &o->arch, &o->ranks, &o->comm,
                          &o->algo, &o->fidelity, &o->root, &o->buffer, &o->dtype};
  for (int i = 1; i < argc; i++) {
    int took = cli_take_set(argc, argv, &i, &o->sets, d);
    if (took < 0) return NPU_EINVAL;
    if (took) continue;
    if (strcmp(argv[i], "--json") == 0) {
      o->json = true;
      continue;
    }
    int k = 0;
    for (size_t j = 0; j < sizeof names / sizeof names[0] && !k; j++) {
      k = take(argc, argv, &i, names[j], slots[j], d);
      if (k < 0) return NPU_EINVAL;
    }
    if (!k) {
      if (argv[i][0] == '-' && argv[i][1] == '-') {
        char opt[64];
        snprintf(opt, sizeof opt, "%.*s", (int)strcspn(argv[i], "="), argv[i]);
        const char *all[sizeof names / sizeof names[0] + 2];
        for (size_t j = 0; j < sizeof names / sizeof names[0]; j++) all[j] = names[j];
        all[sizeof names / sizeof names[0]] = "--json";
        all[sizeof names / sizeof names[0] + 1] = "--set";
        const char *s = npu_suggest(opt, all, sizeof all / sizeof all[0]);
        if (s)
          return npu_diag_set(d, "command line", 0, NULL,
                              "unknown option '%s' for 'collective'; did you mean '%s'?", opt, s),
                 NPU_EINVAL;
      }
      return cli_bad_arg(d, "collective", argv[i]);
    }
  }
  if (!o->op) return missing(d, "--op", "required (e.g. --op allreduce)");
  if (!o->bytes) return missing(d, "--bytes", "required (e.g. --bytes 1GiB)");
  if (!o->arch) return missing(d, "--arch", "required (a preset, see 'npusim arch list')");
  if (o->ranks && o->comm) return missing(d, "--comm", "give either --ranks or --comm, not both");
  return 0;
}

/* A size with a unit ("1GiB"), or a plain number of bytes as nccl-tests takes them. */
static int parse_size(const char *opt, const char *text, double *out, struct npu_diag *d)
{
  char why[256], *end;
  *out = strtod(text, &end);
  if (end == text || *end != '\0') {
    if (npu_unit_parse(text, NPU_UNIT_SIZE, out, why, sizeof why))
      return npu_diag_set(d, "command line", 0, opt, "%s", why), NPU_EINVAL;
  }
  if (!(*out > 0))
    return npu_diag_set(d, "command line", 0, opt, "expected a positive size, got '%s'", text),
           NPU_EINVAL;
  return 0;
}

static int parse_int(const char *opt, const char *text, int lo, int *out, struct npu_diag *d)
{
  char *end;
  long v = strtol(text, &end, 10);
  if (!text[0] || *end || v < lo || v > 100000000L)
    return npu_diag_set(d, "command line", 0, opt, "expected an integer >= %d, got '%s'", lo, text),
           NPU_EINVAL;
  *out = (int)v;
  return 0;
}

static int unknown_name(const char *opt, const char *what, const char *text,
                        const char *const *names, int n, struct npu_diag *d)
{
  const char *s = npu_suggest(text, names, (size_t)n);
  if (s)
    return npu_diag_set(d, "command line", 0, opt, "unknown %s '%s'; did you mean '%s'?", what,
                        text, s), NPU_EINVAL;
  return npu_diag_set(d, "command line", 0, opt, "unknown %s '%s'", what, text), NPU_EINVAL;
}

static int run(int argc, char **argv, struct npu_buf *out, struct npu_diag *d)
{
  struct opts o = {0};
  struct npu_cfg *cfg = NULL;
  struct arch_system sys;
  struct ic_sim *sim = NULL;
  struct ic_comm comm = {0};
  struct ic_run *runs = NULL;
  struct mc_coll_result *res = NULL;
  int *list = NULL, nlist = 0, nruns = 0;
  int rc = parse_args(argc, argv, &o, d);
  if (rc) goto out;

  struct ic_coll coll = {.algo = IC_ALGO_AUTO};
  int n;
  if (ic_op_parse(o.op, &coll.op)) {
    const char *const *names = ic_op_names(&n);
    rc = unknown_name("--op", "operation", o.op, names, n, d);
    goto out;
  }
  if (o.algo && ic_coll_parse_algo(o.algo, &coll)) { /* any name the table prints */
    const char *const *names = ic_algo_names(&n);
    rc = unknown_name("--algo", "algorithm", o.algo, names, n, d);
    goto out;
  }
  if (o.dtype && mc_coll_dtype_bytes(o.dtype) == 0) {
    int nd;
    const char *const *dn = mc_coll_dtype_names(&nd);
    rc = unknown_name("--dtype", "type", o.dtype, dn, nd, d);
    goto out;
  }
  if (o.fidelity && ic_fidelity_parse(o.fidelity, &coll.fidelity)) {
    static const char *const f[] = {"step", "bulk"};
    rc = unknown_name("--fidelity", "fidelity", o.fidelity, f, 2, d);
    goto out;
  }
  double lo, hi;
  const char *colon = strchr(o.bytes, ':');
  if (colon) {
    char first[128];
    snprintf(first, sizeof first, "%.*s", (int)(colon - o.bytes), o.bytes);
    if ((rc = parse_size("--bytes", first, &lo, d)) ||
        (rc = parse_size("--bytes", colon + 1, &hi, d)))
      goto out;
    if (hi < lo) {
      rc = npu_diag_set(d, "command line", 0, "--bytes", "sweep '%s' ends below its start",
                        o.bytes);
      goto out;
    }
  } else {
    if ((rc = parse_size("--bytes", o.bytes, &lo, d))) goto out;
    hi = lo;
  }
  double buffer = 0; /* --buffer: the library's default until given */
  if (o.buffer && (rc = parse_size("--buffer", o.buffer, &buffer, d))) goto out;
  if (o.root && (rc = parse_int("--root", o.root, 0, &coll.root, d))) goto out;
  int nranks = 0;
  if (o.ranks && (rc = parse_int("--ranks", o.ranks, 1, &nranks, d))) goto out;
  if (o.comm) {
    if ((rc = ic_comm_parse_list(o.comm, &list, &nlist, "--comm", d))) goto out;
    for (int i = 0; i < nlist; i++) nranks = list[i] + 1 > nranks ? list[i] + 1 : nranks;
  }

  if ((rc = cli_load_system(&cfg, &sys, o.arch, &o.sets, d))) goto out;
  struct ic_params prm;
  ic_params_default(&prm, &sys); /* the system's library figures (node.ccl) */
  if (o.buffer) prm.buffer_bytes = buffer;
  if (!o.ranks && !o.comm) nranks = ic_topo_system_ranks(&sys);
  if (o.comm && nranks > ic_topo_system_ranks(&sys)) {
    rc = npu_diag_set(d, "command line", 0, "--comm",
                      "rank %d is beyond the %d devices of the system", nranks - 1,
                      ic_topo_system_ranks(&sys));
    goto out;
  }
  if ((rc = ic_sim_create(&sim, &sys, nranks, &prm, d))) {
    snprintf(d->key, sizeof d->key, "%s", o.comm ? "--comm" : "--ranks");
    goto out;
  }
  const struct ic_topo *t = ic_sim_topo(sim);
  rc = o.comm ? ic_comm_init(&comm, list, nlist, t, "--comm", d)
              : ic_comm_init_range(&comm, 0, nranks, 1, t, "--ranks", d);
  if (rc) goto out;
  if (!o.fidelity)
    coll.fidelity = comm.size <= MC_STEP_MAX_RANKS ? IC_FIDELITY_STEP : IC_FIDELITY_BULK;

  for (double s = lo; s <= hi * (1 + 1e-12); s *= 2) nruns++;
  runs = npu_xcalloc((size_t)nruns, sizeof *runs);
  for (int i = 0; i < nruns; i++) {
    runs[i].comm = &comm;
    runs[i].coll = coll;
    runs[i].coll.bytes = lo * pow(2, i);
    runs[i].group = i;
  }
  /* every size is checked before anything runs, so bad input leaves no partial output */
  if ((rc = ic_sim_check(sim, runs, nruns, d))) goto out;
  struct ic_plan plan;
  if ((rc = ic_plan_make(&plan, t, &comm, &runs[0].coll, &prm, d))) goto out;
  for (int i = 0; i < nruns && rc == 0; i++) {
    double *m = coll.op == IC_OP_ALLTOALLV ? mc_alltoallv_matrix(comm.size, runs[i].coll.bytes) : NULL;
    runs[i].coll.matrix = m;
    rc = ic_sim_run(sim, &runs[i], 1, d);
    runs[i].coll.matrix = NULL;
    free(m);
  }
  if (rc) goto out;
  res = npu_xcalloc((size_t)nruns, sizeof *res);
  for (int i = 0; i < nruns; i++) {
    res[i] = (struct mc_coll_result){.op = runs[i].coll.op, .fidelity = runs[i].coll.fidelity, .ranks = comm.size,
                                     .servers = plan.servers, .bytes = runs[i].coll.bytes,
                                     .time_s = runs[i].result.time_s, .loops = runs[i].result.plan.loops,
                                     .flows = (int64_t)runs[i].result.flows, .root = runs[i].coll.root};
    snprintf(res[i].algorithm, sizeof res[i].algorithm, "%s", runs[i].result.plan.name);
  }
  if (o.json) mc_coll_json(o.arch, res, nruns, out);
  else mc_coll_text(o.arch, res, nruns, o.dtype, out);
out:
  free(res);
  free(runs);
  free(list);
  ic_comm_release(&comm);
  ic_sim_destroy(sim);
  npu_cfg_destroy(cfg);
  free(o.sets.items);
  return rc;
}

const struct npu_cmd npu_cmd_collective = {
    "collective", "simulate a collective on a cluster: time, algbw, busbw (nccl-tests style)",
    usage, run, NULL};
