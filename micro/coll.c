/*
 * coll.c - collective scenarios: the collective section, loading with located errors, running
 * one collective on the system's cluster (interconnect/run.h), and the reports shared with
 * `npusim collective`. See micro.h.
 */
#include "micro/micro.h"

#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/json.h"
#include "common/strutil.h"
#include "report/columns.h"
#include "report/html.h"
#include "common/units.h"
#include "interconnect/comm.h"
#include "interconnect/run.h"
#include "interconnect/select.h"
#include "interconnect/topo.h"
#include "micro/micro_int.h"

#define NPU_PARAM_STRUCT struct mc_coll_spec

/* The operations and algorithms, in enum ic_op / enum ic_algo order (checked at registration). */
static const char *const op_names[] = {"allreduce", "reducescatter", "allgather", "alltoall", "alltoallv",
                                       "broadcast", "reduce",        "sendrecv",  NULL};
static const char *const fid_names[] = {"auto", "step", "bulk", NULL};

static const struct npu_section sections[] = {
    {"collective", false, "one collective on the system's cluster"},
};

static const struct npu_param params[] = {
    {"collective.op", NPU_PT_ENUM, NPU_PARAM_OFF(op), 0, NULL, 0, 0, 0, op_names, "the collective operation"},
    {"collective.bytes", NPU_PT_SIZE, NPU_PARAM_OFF(bytes), 0, NULL, NPU_PF_POSITIVE, 0, 0, NULL,
     "S per rank, nccl-tests convention (allgather: the gathered output; reducescatter: the input; alltoall: all a "
     "rank sends)"},
    {"collective.ranks", NPU_PT_INT, NPU_PARAM_OFF(ranks), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "the communicator is ranks 0..ranks-1 (rank r on node r / node.devices); 0: every device"},
    {"collective.comm", NPU_PT_STRING, NPU_PARAM_OFF(comm), NPU_PARAM_SZ(comm), "", 0, 0, 0, NULL,
     "or the communicator's ranks as a list, \"0,8,16,24\" or \"0-3,8-11\" (not with ranks)"},
    {"collective.algorithm", NPU_PT_STRING, NPU_PARAM_OFF(algorithm), NPU_PARAM_SZ(algorithm), "auto", 0, 0, 0, NULL,
     "any name the algorithm column prints, or auto (the collective library's selection): " IC_ALGO_FORMS},
    {"collective.fidelity", NPU_PT_ENUM, NPU_PARAM_OFF(fidelity), 0, "auto", 0, 0, 0, fid_names,
     "step (every algorithm step a flow), bulk (one flow per rank and link class per phase), auto (step up to 512 "
     "ranks, bulk above)"},
    {"collective.root", NPU_PT_INT, NPU_PARAM_OFF(root), 0, "0", NPU_PF_NONNEG, 0, 0, NULL,
     "root of broadcast / reduce, a position in the communicator"},
    {"collective.buffer", NPU_PT_SIZE, NPU_PARAM_OFF(buffer), 0, "200MB", NPU_PF_POSITIVE, 0, 0, NULL,
     "communicator buffer; larger payloads loop (HCCL's default)"},
};

static const struct npu_table table = {sections, sizeof sections / sizeof sections[0], params,
                                       sizeof params / sizeof params[0]};

void mc__coll_register(struct npu_cfg *cfg, struct mc_coll_spec *spec)
{
  for (int i = 0; op_names[i]; i++) NPU_ASSERT(!strcmp(op_names[i], ic_op_name((enum ic_op)i)));
  memset(spec, 0, sizeof *spec);
  npu_cfg_add_table(cfg, &table, spec);
}

void mc_coll_init(struct mc_coll_job *job, const char *path)
{
  memset(job, 0, sizeof *job);
  snprintf(job->path, sizeof job->path, "%s", path);
  job->cfg = npu_cfg_create();
  npu_cfg_set_display_root(job->cfg, arch_source_root());
  arch_register(job->cfg, &job->sys);
  mc__coll_register(job->cfg, &job->spec);
}

/* A message of interconnect/ (command-line flavoured) moved to the scenario key it is about. */
static int relocate(const struct mc_coll_job *job, int rc, struct npu_diag *diag)
{
  struct npu_diag d = *diag;
  const char *k = d.key[0] == '-' && d.key[1] == '-' ? d.key + 2 : d.key;
  const char *key = "collective.op";
  if (!strcmp(k, "algo")) key = "collective.algorithm";
  else if (!strcmp(k, "bytes")) key = "collective.bytes";
  else if (!strcmp(k, "root")) key = "collective.root";
  else if (!strcmp(k, "ranks") || !strcmp(k, "comm")) key = job->spec.comm[0] ? "collective.comm" : "collective.ranks";
  npu_cfg_fail(job->cfg, diag, key, "%s", d.msg);
  return rc ? rc : NPU_ECONFIG;
}

/* Everything a run needs, built from the loaded job: the cluster, the communicator, the request. */
struct prepared {
  struct ic_params prm;
  struct ic_sim *sim;
  struct ic_comm comm;
  struct ic_coll coll;
};

static void unprepare(struct prepared *p)
{
  ic_comm_release(&p->comm);
  ic_sim_destroy(p->sim);
  memset(p, 0, sizeof *p);
}

static int prepare(struct mc_coll_job *job, struct prepared *p, struct npu_diag *diag)
{
  memset(p, 0, sizeof *p);
  const struct mc_coll_spec *s = &job->spec;
  ic_params_default(&p->prm, &job->sys);
  p->prm.buffer_bytes = (double)s->buffer;
  p->coll = (struct ic_coll){.op = (enum ic_op)s->op, .bytes = (double)s->bytes, .root = s->root};
  if (ic_coll_parse_algo(s->algorithm, &p->coll)) {
    int n;
    const char *const *names = ic_algo_names(&n);
    const char *sug = npu_suggest(s->algorithm, names, (size_t)n);
    return npu_cfg_fail(job->cfg, diag, "collective.algorithm",
                        "unknown algorithm '%s'%s%s%s (" IC_ALGO_FORMS ")",
                        s->algorithm, sug ? "; did you mean '" : "", sug ? sug : "", sug ? "'?" : "");
  }
  int system = ic_topo_system_ranks(&job->sys);
  int *list = NULL, nlist = 0, rc = 0;
  if (s->comm[0] && s->ranks)
    return npu_cfg_fail(job->cfg, diag, "collective.comm", "give either collective.ranks or collective.comm, not both");
  if (s->comm[0]) {
    if (ic_comm_parse_list(s->comm, &list, &nlist, "comm", diag)) return relocate(job, NPU_ECONFIG, diag);
    job->nranks = 0;
    for (int i = 0; i < nlist; i++) job->nranks = list[i] + 1 > job->nranks ? list[i] + 1 : job->nranks;
    if (job->nranks > system)
      rc = npu_cfg_fail(job->cfg, diag, "collective.comm", "rank %d is beyond the %d devices of the system",
                        job->nranks - 1, system);
  } else {
    job->nranks = s->ranks ? s->ranks : system;
    if (job->nranks > system)
      rc = npu_cfg_fail(job->cfg, diag, "collective.ranks", "%d ranks, but the system has %d devices", job->nranks,
                        system);
  }
  if (!rc && ic_sim_create(&p->sim, &job->sys, job->nranks, &p->prm, diag)) rc = relocate(job, NPU_ECONFIG, diag);
  if (!rc) {
    const struct ic_topo *t = ic_sim_topo(p->sim);
    rc = s->comm[0] ? ic_comm_init(&p->comm, list, nlist, t, "comm", diag)
                    : ic_comm_init_range(&p->comm, 0, job->nranks, 1, t, "ranks", diag);
    if (rc) rc = relocate(job, NPU_ECONFIG, diag);
  }
  free(list);
  if (!rc) {
    p->coll.fidelity = s->fidelity == 2 || (s->fidelity == 0 && p->comm.size > MC_STEP_MAX_RANKS) ? IC_FIDELITY_BULK
                                                                                                  : IC_FIDELITY_STEP;
    struct ic_run r = {.comm = &p->comm, .coll = p->coll};
    if (ic_sim_check(p->sim, &r, 1, diag)) rc = relocate(job, NPU_ECONFIG, diag);
  }
  if (rc) unprepare(p);
  return rc;
}

int mc_coll_finish(struct mc_coll_job *job, struct npu_diag *diag)
{
  int rc = npu_cfg_finish(job->cfg, diag);
  if (!rc) rc = arch_finish(job->cfg, &job->sys, diag);
  if (rc) return rc;
  if (!npu_cfg_section_present(job->cfg, "collective"))
    return npu_diag_set(diag, job->path, 0, "collective", "the scenario has no collective section"), NPU_ECONFIG;
  struct prepared p;
  rc = prepare(job, &p, diag);
  if (!rc) unprepare(&p);
  return rc;
}

int mc_coll_load(struct mc_coll_job *job, const char *path, const char *const *sets, int nsets,
                 struct npu_diag *diag)
{
  mc_coll_init(job, path);
  int rc = npu_cfg_load_file(job->cfg, path, diag);
  for (int i = 0; !rc && i < nsets; i++) rc = npu_cfg_set(job->cfg, sets[i], diag);
  if (!rc) rc = mc_coll_finish(job, diag);
  return rc;
}

void mc_coll_release(struct mc_coll_job *job)
{
  if (job->cfg) npu_cfg_destroy(job->cfg);
  memset(job, 0, sizeof *job);
}

double *mc_alltoallv_matrix(int p, double bytes)
{
  double *m = npu_xcalloc((size_t)p * p, sizeof *m);
  double c = bytes / p;
  for (int i = 0; i < p; i++)
    for (int j = 0; j < p; j++)
      if (i != j) m[(size_t)i * p + j] = 2 * c * (1 + (i + j) % p) / (p + 1);
  return m;
}

int mc_coll_run(struct mc_coll_job *job, struct mc_coll_result *res, struct npu_diag *diag)
{
  struct prepared p;
  int rc = prepare(job, &p, diag);
  if (rc) return rc;
  struct ic_plan plan;
  rc = ic_plan_make(&plan, ic_sim_topo(p.sim), &p.comm, &p.coll, &p.prm, diag);
  if (rc) {
    unprepare(&p);
    return relocate(job, rc, diag);
  }
  struct ic_run r = {.comm = &p.comm, .coll = p.coll};
  double *m = p.coll.op == IC_OP_ALLTOALLV ? mc_alltoallv_matrix(p.comm.size, p.coll.bytes) : NULL;
  r.coll.matrix = m;
  rc = ic_sim_run(p.sim, &r, 1, diag);
  free(m);
  if (!rc) {
    memset(res, 0, sizeof *res);
    res->op = p.coll.op;
    res->fidelity = p.coll.fidelity;
    res->ranks = p.comm.size;
    res->servers = plan.servers;
    res->bytes = p.coll.bytes;
    res->time_s = r.result.time_s;
    res->root = p.coll.root;
    snprintf(res->algorithm, sizeof res->algorithm, "%s", r.result.plan.name);
    res->loops = r.result.plan.loops;
    res->flows = (int64_t)r.result.flows;
  }
  unprepare(&p);
  return rc;
}

/* ------------------------------------------------------------------ reports */

/* One result's flat fields: columns of summary.csv (they read the result only). */
static void result_json(struct npu_json *j, const struct mc_coll_result *r)
{
  static const char *const names[] = {"bytes", "time_s", "algbw_bytes_per_s", "busbw_bytes_per_s", "algorithm",
                                      "loops", "flows"};
  struct mc_coll_report x = {NULL, r};
  rpt_columns_json_some(mc_coll_columns(), &x, names, (int)(sizeof names / sizeof names[0]), j);
}

void mc_coll_json(const char *arch, const struct mc_coll_result *r, int n, struct npu_buf *out)
{
  struct npu_json j;
  npu_json_init(&j, out);
  npu_json_object_begin(&j);
  npu_json_key(&j, "op");
  npu_json_string(&j, ic_op_name(r[0].op));
  npu_json_key(&j, "arch");
  npu_json_string(&j, arch);
  npu_json_key(&j, "ranks");
  npu_json_int(&j, r[0].ranks);
  npu_json_key(&j, "servers");
  npu_json_int(&j, r[0].servers);
  npu_json_key(&j, "fidelity");
  npu_json_string(&j, ic_fidelity_name(r[0].fidelity));
  npu_json_key(&j, "busbw_factor");
  npu_json_number(&j, ic_busbw_factor(r[0].op, r[0].ranks));
  if (n == 1) {
    result_json(&j, &r[0]);
  } else {
    npu_json_key(&j, "results");
    npu_json_array_begin(&j);
    for (int i = 0; i < n; i++) {
      npu_json_object_begin(&j);
      result_json(&j, &r[i]);
      npu_json_object_end(&j);
    }
    npu_json_array_end(&j);
  }
  npu_json_object_end(&j);
  npu_json_finish(&j);
}

static const char *const dtype_names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float",
                                          "double", "bfloat16"};
static const int dtype_bytes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
#define NDTYPES (int)(sizeof dtype_bytes / sizeof dtype_bytes[0])

int mc_coll_dtype_bytes(const char *name)
{
  for (int i = 0; i < NDTYPES; i++)
    if (!strcmp(name, dtype_names[i])) return dtype_bytes[i];
  return 0;
}

const char *const *mc_coll_dtype_names(int *n)
{
  *n = NDTYPES;
  return dtype_names;
}

/* nccl-tests' table: size, count, type, redop, root, then time, algbw and busbw; the model does
 * not tell in-place from out-of-place (the same transfers), so one group stands for both. */
void mc_coll_text(const char *arch, const struct mc_coll_result *r, int n, const char *dtype, struct npu_buf *out)
{
  enum ic_op op = r[0].op;
  int p = r[0].ranks, servers = r[0].servers;
  const char *type = dtype ? dtype : "float";
  int eb = mc_coll_dtype_bytes(type);
  bool reduces = op == IC_OP_ALLREDUCE || op == IC_OP_REDUCESCATTER || op == IC_OP_REDUCE;
  bool rooted = op == IC_OP_BROADCAST || op == IC_OP_REDUCE;
  char f[64];
  npu_fmt_double(ic_busbw_factor(op, p), f, sizeof f);
  npu_buf_printf(out, "# npusim collective: %s, %d rank%s on %d server%s of %s, fidelity %s\n", ic_op_name(op), p,
                 p == 1 ? "" : "s", servers, servers == 1 ? "" : "s", arch, ic_fidelity_name(r[0].fidelity));
  npu_buf_printf(out, "# algbw = size / time; busbw = algbw x %s (nccl-tests convention)\n#\n", f);
  npu_buf_printf(out, "#%56s%s\n", "", "out-of-place = in-place (the model moves the same bytes)");
  npu_buf_printf(out, "#%14s %13s %9s %7s %7s %14s %12s %12s %6s  %s\n", "size(B)", "count", "type", "redop", "root",
                 "time(us)", "algbw(GB/s)", "busbw(GB/s)", "loops", "algorithm");
  double sum = 0;
  for (int i = 0; i < n; i++) {
    double algbw = ic_algbw_bytes_per_s(r[i].bytes, r[i].time_s), busbw = algbw * ic_busbw_factor(op, p);
    sum += busbw;
    npu_buf_printf(out, "%15.0f %13.0f %9s %7s %7d %14.2f %12.2f %12.2f %6d  %s\n", r[i].bytes, floor(r[i].bytes / eb),
                   type, reduces ? "sum" : "none", rooted ? r[i].root : -1, r[i].time_s * 1e6, algbw / 1e9, busbw / 1e9,
                   r[i].loops, r[i].algorithm);
  }
  npu_buf_printf(out, "# Avg bus bandwidth    : %g GB/s\n", n ? sum / n / 1e9 : 0.0);
}

void mc_coll_html(const char *path, const char *arch, const struct mc_coll_result *r, double mark_bytes_per_s,
                  const char *mark, struct npu_buf *out)
{
  enum ic_op op = r->op;
  double algbw = ic_algbw_bytes_per_s(r->bytes, r->time_s), busbw = algbw * ic_busbw_factor(op, r->ranks);
  char title[256], comm[160], size[64], time[64], alg[64], bus[160], flows[64];
  snprintf(title, sizeof title, "%s on %d ranks of %s", ic_op_name(op), r->ranks, arch);
  snprintf(comm, sizeof comm, "%d rank%s on %d server%s of %s", r->ranks, r->ranks == 1 ? "" : "s", r->servers,
           r->servers == 1 ? "" : "s", arch);
  npu_fmt_human(r->bytes, "B", size, sizeof size);
  npu_fmt_human_time(r->time_s, time, sizeof time);
  npu_fmt_human(algbw, "B/s", alg, sizeof alg);
  char f[32], b[64];
  npu_fmt_double(ic_busbw_factor(op, r->ranks), f, sizeof f);
  npu_fmt_human(busbw, "B/s", b, sizeof b);
  snprintf(bus, sizeof bus, "%s (algbw x %s, the nccl-tests convention)", b, f);
  snprintf(flows, sizeof flows, "%lld", (long long)r->flows);
  rpt_html_begin(out, title);
  const char *names[] = {"scenario", "operation", "communicator", "size (nccl-tests)", "time", "algbw", "busbw",
                         "algorithm", "fidelity", "flows"};
  const char *values[] = {path, ic_op_name(op), comm, size, time, alg, bus, r->algorithm, ic_fidelity_name(r->fidelity),
                          flows};
  rpt_html_facts(out, names, values, 10);
  rpt_html_heading(out, "Bus bandwidth");
  rpt_html_para(out, "algbw is the size over the time; busbw scales it by what each rank must move for the "
                     "operation, so it compares with what a device's links carry in one direction (the mark).");
  static const char *const series[] = {"GB/s"};
  static const char *const rows[] = {"algbw", "busbw"};
  double v[2] = {algbw / 1e9, busbw / 1e9}, m = mark_bytes_per_s / 1e9;
  struct rpt_html_chart ch = {series, 1, rows, 2, v, m > fmax(v[0], v[1]) ? m : 0, "GB/s", 1, m, m > 0 ? mark : NULL};
  rpt_html_bars(out, &ch);
  rpt_html_heading(out, "As nccl-tests prints it");
  struct npu_buf txt = {0};
  mc_coll_text(arch, r, 1, NULL, &txt);
  rpt_html_pre(out, npu_buf_str(&txt));
  npu_buf_release(&txt);
  rpt_html_end(out);
}

/* ------------------------------------------------------------------ columns */

#define J(ctx) (((const struct mc_coll_report *)(ctx))->job)
#define R(ctx) (((const struct mc_coll_report *)(ctx))->res)

static const char *c_scenario(const void *x, int i) { (void)i; return J(x)->path; }
static const char *c_op(const void *x, int i) { (void)i; return ic_op_name(R(x)->op); }
static const char *c_system(const void *x, int i) { (void)i; return mc_system_name(&J(x)->sys); }
static long long c_ranks(const void *x, int i) { (void)i; return R(x)->ranks; }
static long long c_servers(const void *x, int i) { (void)i; return R(x)->servers; }
static const char *c_fidelity(const void *x, int i) { (void)i; return ic_fidelity_name(R(x)->fidelity); }
static double c_bytes(const void *x, int i) { (void)i; return R(x)->bytes; }
static double c_time(const void *x, int i) { (void)i; return R(x)->time_s; }
static double c_algbw(const void *x, int i) { (void)i; return ic_algbw_bytes_per_s(R(x)->bytes, R(x)->time_s); }
static double c_factor(const void *x, int i) { (void)i; return ic_busbw_factor(R(x)->op, R(x)->ranks); }
static double c_busbw(const void *x, int i) { return c_algbw(x, i) * c_factor(x, i); }
static long long c_loops(const void *x, int i) { (void)i; return R(x)->loops; }
static long long c_flows(const void *x, int i) { (void)i; return (long long)R(x)->flows; }
static const char *c_algorithm(const void *x, int i) { (void)i; return R(x)->algorithm; }

/* summary.csv of a collective scenario; units in the names, the order is the contract. */
static const struct rpt_column coll_columns[] = {
    {"scenario", RPT_STRING, "text", "the scenario file (or the sweep point's name)", .text = c_scenario},
    {"op", RPT_STRING, "text", "the collective operation", .text = c_op},
    {"system", RPT_STRING, "text", "the system's name (cluster, else node, else chip)", .text = c_system},
    {"ranks", RPT_INT, "", "ranks of the communicator", .integer = c_ranks},
    {"servers", RPT_INT, "", "servers the communicator spans", .integer = c_servers},
    {"fidelity", RPT_STRING, "text", "step or bulk", .text = c_fidelity},
    {"bytes", RPT_REAL, "bytes", "size S per rank (nccl-tests convention)", .real = c_bytes},
    {"time_s", RPT_REAL, "s", "time of the collective", .real = c_time},
    {"algbw_bytes_per_s", RPT_REAL, "bytes/s", "bytes / time_s", .real = c_algbw},
    {"busbw_bytes_per_s", RPT_REAL, "bytes/s", "algbw x busbw_factor (nccl-tests convention)", .real = c_busbw},
    {"busbw_factor", RPT_REAL, "ratio", "the operation's bus-bandwidth factor for the ranks", .real = c_factor},
    {"loops", RPT_INT, "", "passes through the communicator buffer", .integer = c_loops},
    {"flows", RPT_INT, "", "flows simulated", .integer = c_flows},
    {"algorithm", RPT_STRING, "text", "the algorithm chosen (or set)", .text = c_algorithm},
    {NULL},
};

#undef J
#undef R

const struct rpt_column *mc_coll_columns(void)
{
  return coll_columns;
}

void mc_coll_csv_header(struct npu_buf *out)
{
  rpt_columns_csv_header(coll_columns, out);
}

void mc_coll_csv_row(const struct mc_coll_job *job, const struct mc_coll_result *r, struct npu_buf *out)
{
  struct mc_coll_report x = {job, r};
  rpt_columns_csv_row(coll_columns, &x, out);
}
