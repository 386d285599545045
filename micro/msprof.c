/* msprof.c - a kernel run in the msprof op simulator's layout; see msprof.h. */
#include "micro/msprof.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/dtype.h"
#include "common/err.h"
#include "common/json.h"
#include "memory/dma.h"
#include "report/chrome.h"
#include "report/trace_file.h"

/* msprof's pipe names, in enum core_pipe order (S, MTE2, MTE1, M, FIX, V, MTE3). */
static const char *const pipe_track[CORE_PIPE_COUNT] = {"SCALAR", "MTE2", "MTE1", "CUBE", "FIXP", "VECTOR", "MTE3"};

/* Ascend C's pipe names (PIPE_S, PIPE_MTE2, ...), for the flags' details. */
static const char *const pipe_ascend[CORE_PIPE_COUNT] = {"S", "MTE2", "MTE1", "M", "FIX", "V", "MTE3"};

/* One distinct instruction form on a core: a row of instr_exe.csv. */
struct form {
  char name[32];
  char detail[96];
  int pipe;
  uint64_t calls, bytes, repeat;
  double time_s;
};

struct core_out {
  bool used;
  char name[48];                 /* core<N>.cubecore0 / core<N>.veccore<M> */
  int unit, kind;                /* kind: 0 cube (or coupled), 1 vector */
  struct rpt_trace_file *trace;  /* its trace.json */
  double busy[CORE_PIPE_COUNT];  /* instruction time per pipe (flags and waits excluded) */
  double end_s;                  /* its last instruction's end, from the first body's start */
  struct form *forms;
  size_t nforms, cap;
};

/* One kernel launch of the run: a row of OpBasicInfo.csv. */
struct launch {
  double t0, end_s;              /* body start (engine clock), last end relative to it */
  int *units;                    /* distinct units seen */
  int nunits, ucap;
  int aic, aiv;                  /* cores of each kind that ran */
  bool *core_seen;
};

struct mc_msprof {
  struct core_observer obs;
  const struct arch_chip *chip;
  char *dir, *tmp;
  struct rpt_trace_file *summary;
  struct core_out *cores;
  int ncores;
  struct launch *launches;
  int nlaunches;
  double first_t0;
  struct npu_buf ev;             /* one event being formatted */
  int err;                       /* first failure (a core folder that could not be made) */
  char err_path[4096];
};

static void core_name(const struct arch_chip *chip, int id, char *buf, size_t n, int *kind)
{
  if (chip->org == ARCH_ORG_SPLIT && id >= chip->aic_count) {
    int r = chip->aiv_count / chip->aic_count, j = id - chip->aic_count;
    if (r < 1) r = 1;
    snprintf(buf, n, "core%d.veccore%d", j / r, j % r);
    *kind = 1;
  } else {
    snprintf(buf, n, "core%d.cubecore0", id);
    *kind = 0;
  }
}

static void upper(char *dst, size_t n, const char *prefix, const char *s)
{
  size_t k = 0;
  for (const char *p = prefix; *p && k + 1 < n; p++) dst[k++] = *p;
  for (const char *p = s; *p && k + 1 < n; p++) dst[k++] = (char)toupper((unsigned char)*p);
  dst[k] = '\0';
}

/* The mnemonic, detail and repeat count of an instruction. */
static void describe(const struct arch_chip *chip, const struct core_instr *in, char *name, size_t nn, char *detail,
                     size_t nd, uint64_t *repeat)
{
  *repeat = 0;
  switch (in->op) {
  case CORE_OP_COPY: {
    const struct core_copy *cp = &in->u.copy;
    enum arch_path p;
    upper(name, nn, "MOV_", mem_path_of(chip, cp->src.space, cp->dst.space, &p) ? arch_path_name(p) : "copy");
    snprintf(detail, nd, "%ux%u %s->%s%s%s%s", cp->src.rows, cp->src.cols, npu_dtype_name(cp->src.dtype),
             npu_dtype_name(cp->dst.dtype), cp->transpose ? " transpose" : "", cp->atomic_add ? " atomic_add" : "",
             cp->indexed ? " indexed" : "");
    break;
  }
  case CORE_OP_MMAD: {
    const struct core_mmad *mm = &in->u.mmad;
    snprintf(name, nn, "%s", mm->mx ? "MMAD_MX" : "MMAD");
    snprintf(detail, nd, "m=%u k=%u n=%u %s%s", mm->m, mm->k, mm->n, npu_dtype_name(mm->dtype), mm->init ? "" : " acc");
    break;
  }
  case CORE_OP_VEC: {
    const struct core_vec *v = &in->u.vec;
    upper(name, nn, "V", core_vec_op_name((enum core_vec_op)v->op));
    snprintf(detail, nd, "%s repeat=%u", npu_dtype_name(v->dtype), v->repeat);
    *repeat = v->repeat;
    break;
  }
  case CORE_OP_SCALAR:
    snprintf(name, nn, "SCALAR");
    snprintf(detail, nd, "%g cycles", in->u.cycles);
    break;
  case CORE_OP_SET_FLAG:
  case CORE_OP_WAIT_FLAG:
    snprintf(name, nn, "%s", in->op == CORE_OP_SET_FLAG ? "SET_FLAG" : "WAIT_FLAG");
    snprintf(detail, nd, "PIPE_%s->PIPE_%s id=%u", pipe_ascend[in->src_pipe], pipe_ascend[in->dst_pipe], in->id);
    break;
  case CORE_OP_XSET:
  case CORE_OP_XWAIT:
    snprintf(name, nn, "%s", in->op == CORE_OP_XSET ? "CROSS_CORE_SET_FLAG" : "CROSS_CORE_WAIT_FLAG");
    snprintf(detail, nd, "id=%u peer sub-core %u", in->id, in->dst_pipe);
    break;
  case CORE_OP_NOTIFY:
  case CORE_OP_NOTIFY_WAIT:
    snprintf(name, nn, "%s", in->op == CORE_OP_NOTIFY ? "NOTIFY" : "NOTIFY_WAIT");
    if (in->op == CORE_OP_NOTIFY)
      snprintf(detail, nd, "device %u signal %u", in->u.sig.rank, in->u.sig.id);
    else
      snprintf(detail, nd, "signal %u count %u", in->u.sig.id, in->u.sig.count);
    break;
  case CORE_OP_BARRIER:
    snprintf(name, nn, "PIPE_BARRIER");
    snprintf(detail, nd, "PIPE_%s", pipe_ascend[in->pipe]);
    break;
  default:
    snprintf(name, nn, "SYNC");
    detail[0] = '\0';
  }
}

static struct form *form_of(struct core_out *c, const char *name, const char *detail, int pipe)
{
  for (size_t i = c->nforms; i-- > 0;) { /* few forms per core; the latest are the likeliest */
    struct form *f = &c->forms[i];
    if (f->pipe == pipe && !strcmp(f->name, name) && !strcmp(f->detail, detail)) return f;
  }
  if (c->nforms == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 32;
    c->forms = npu_xrealloc(c->forms, c->cap * sizeof *c->forms);
  }
  struct form *f = &c->forms[c->nforms++];
  memset(f, 0, sizeof *f);
  npu_strlcpy(f->name, name, sizeof f->name);
  npu_strlcpy(f->detail, detail, sizeof f->detail);
  f->pipe = pipe;
  return f;
}

static struct launch *launch_of(struct mc_msprof *m, double t0)
{
  for (int i = m->nlaunches; i-- > 0;)
    if (m->launches[i].t0 == t0) return &m->launches[i];
  m->launches = npu_xrealloc(m->launches, (size_t)(m->nlaunches + 1) * sizeof *m->launches);
  struct launch *l = &m->launches[m->nlaunches++];
  memset(l, 0, sizeof *l);
  l->t0 = t0;
  l->core_seen = npu_xcalloc((size_t)m->ncores, sizeof *l->core_seen);
  if (m->nlaunches == 1) m->first_t0 = t0;
  return l;
}

static bool is_work(const struct core_instr *in)
{
  return in->op == CORE_OP_COPY || in->op == CORE_OP_MMAD || in->op == CORE_OP_VEC || in->op == CORE_OP_SCALAR;
}

/* The kernel's time is first instruction to last completion (cores/stats.c): flags landing
 * after the last instruction do not extend it. */
static void launch_note(struct mc_msprof *m, struct launch *l, const struct core_obs_instr *e)
{
  if (is_work(e->in) && e->end_s > l->end_s) l->end_s = e->end_s;
  if (!l->core_seen[e->core]) {
    l->core_seen[e->core] = true;
    ++*(m->cores[e->core].kind ? &l->aiv : &l->aic);
  }
  for (int i = 0; i < l->nunits; i++)
    if (l->units[i] == e->unit) return;
  if (l->nunits == l->ucap) {
    l->ucap = l->ucap ? 2 * l->ucap : 32;
    l->units = npu_xrealloc(l->units, (size_t)l->ucap * sizeof *l->units);
  }
  l->units[l->nunits++] = e->unit;
}

static int make_dir(const char *path)
{
  return mkdir(path, 0777) == 0 || errno == EEXIST ? 0 : errno;
}

static struct core_out *core_open(struct mc_msprof *m, int id, int unit)
{
  struct core_out *c = &m->cores[id];
  if (c->used) return c;
  c->used = true;
  c->unit = unit;
  core_name(m->chip, id, c->name, sizeof c->name, &c->kind);
  char path[4096];
  snprintf(path, sizeof path, "%s/simulator/%s", m->tmp, c->name);
  int e = make_dir(path);
  if (!e) {
    snprintf(path, sizeof path, "%s/simulator/%s/trace.json", m->tmp, c->name);
    struct npu_diag d = {0};
    if (rpt_trace_file_open(&c->trace, path, "--msprof", &d)) e = EIO;
  }
  if (e && !m->err) {
    m->err = e;
    npu_strlcpy(m->err_path, path, sizeof m->err_path);
  }
  return c;
}

/* One X event with args, then the flow event a set starts or a wait ends. */
static void emit(struct mc_msprof *m, struct core_out *c, const struct core_obs_instr *e, double ts, const char *name,
                 const char *detail, uint64_t repeat)
{
  struct npu_buf *b = &m->ev;
  b->len = 0;
  npu_buf_puts(b, "{\"name\":");
  npu_json_quote(b, name);
  npu_buf_puts(b, ",\"ph\":\"X\",\"ts\":");
  rpt_chrome_us(b, ts);
  npu_buf_puts(b, ",\"dur\":");
  rpt_chrome_us(b, e->end_s - e->start_s);
  npu_buf_printf(b, ",\"pid\":%d,\"tid\":%d,\"args\":{\"bytes\":%" PRIu64 ",\"repeat\":%" PRIu64 ",\"detail\":", e->core,
                 e->pipe, e->bytes, repeat);
  npu_json_quote(b, detail);
  npu_buf_puts(b, "}}");
  bool set = e->in->op == CORE_OP_SET_FLAG || e->in->op == CORE_OP_XSET;
  if (e->flow) {
    npu_buf_printf(b, ",\n{\"name\":\"flag\",\"cat\":\"%s\",\"ph\":\"%s\",%s\"id\":%" PRIu64 ",\"ts\":",
                   e->in->op == CORE_OP_XSET || e->in->op == CORE_OP_XWAIT ? "cross_core_flag" : "flag", set ? "s" : "f",
                   set ? "" : "\"bp\":\"e\",", e->flow);
    rpt_chrome_us(b, set ? ts : ts + (e->end_s - e->start_s));
    npu_buf_printf(b, ",\"pid\":%d,\"tid\":%d}", e->core, e->pipe);
  }
  rpt_trace_file_json(m->summary, b->data, b->len);
  if (c->trace) rpt_trace_file_json(c->trace, b->data, b->len);
}

static void observe(void *ctx, const struct core_obs_instr *e)
{
  struct mc_msprof *m = ctx;
  struct launch *l = launch_of(m, e->body_t0_s);
  struct core_out *c = core_open(m, e->core, e->unit);
  launch_note(m, l, e);
  double ts = e->body_t0_s - m->first_t0 + e->start_s, end = ts + (e->end_s - e->start_s);
  char name[32], detail[96];
  uint64_t repeat;
  describe(m->chip, e->in, name, sizeof name, detail, sizeof detail, &repeat);
  struct form *f = form_of(c, name, detail, e->pipe);
  f->calls++;
  f->bytes += e->bytes;
  f->repeat += repeat;
  f->time_s += e->end_s - e->start_s;
  if (is_work(e->in)) {
    c->busy[e->pipe] += e->end_s - e->start_s;
    if (end > c->end_s) c->end_s = end;
  }
  emit(m, c, e, ts, name, detail, repeat);
}

static bool dir_empty(const char *path)
{
  DIR *d = opendir(path);
  if (!d) return false;
  struct dirent *de;
  bool empty = true;
  while (empty && (de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = false;
  closedir(d);
  return empty;
}

int mc_msprof_open(struct mc_msprof **out, const char *dir, const struct arch_chip *chip, struct npu_diag *diag)
{
  *out = NULL;
  struct stat st;
  if (stat(dir, &st) == 0 && !(S_ISDIR(st.st_mode) && dir_empty(dir)))
    return npu_diag_set(diag, dir, 0, "--msprof",
                        "exists and is not an empty directory (msprof output goes into a new one)"),
           NPU_EINVAL;
  struct mc_msprof *m = npu_xcalloc(1, sizeof *m);
  m->obs = (struct core_observer){observe, m};
  m->chip = chip;
  m->dir = npu_xstrdup(dir);
  size_t n = strlen(dir) + 32;
  m->tmp = npu_xmalloc(n);
  snprintf(m->tmp, n, "%s.partial%ld", dir, (long)getpid());
  m->ncores = chip->org == ARCH_ORG_SPLIT ? chip->aic_count + chip->aiv_count : chip->aic_count;
  m->cores = npu_xcalloc((size_t)m->ncores, sizeof *m->cores);
  char path[4096];
  snprintf(path, sizeof path, "%s/simulator", m->tmp);
  int e = make_dir(m->tmp);
  if (!e) e = make_dir(path);
  if (e) {
    npu_diag_set(diag, m->tmp, 0, "--msprof", "cannot create the directory: %s", strerror(e));
    mc_msprof_abort(m);
    return NPU_EIO;
  }
  snprintf(path, sizeof path, "%s/simulator/trace.json", m->tmp);
  int rc = rpt_trace_file_open(&m->summary, path, "--msprof", diag);
  if (rc) {
    mc_msprof_abort(m);
    return rc;
  }
  *out = m;
  return 0;
}

const struct core_observer *mc_msprof_observer(struct mc_msprof *m)
{
  return &m->obs;
}

/* The thread and process names of core c into a trace. */
static void name_tracks(struct npu_trace *t, const struct core_out *c, int id)
{
  npu_trace_name(t, id, -1, c->name);
  for (int p = 0; p < CORE_PIPE_COUNT; p++) npu_trace_name(t, id, p, pipe_track[p]);
}

static void put_time(struct npu_buf *b, double s)
{
  npu_buf_puts(b, ",");
  rpt_chrome_us(b, s);
}

static void put_ratio(struct npu_buf *b, double busy, double t)
{
  npu_buf_printf(b, ",%.6f", t > 0 ? busy / t : 0.0);
}

/* PipeUtilization.csv: one row per core that ran, in msprof's A2 column order; the columns of
 * the other kind of core are N/A, as msprof writes them. */
static void pipe_utilization(const struct mc_msprof *m, const char *op, struct npu_buf *b)
{
  (void)op;
  npu_buf_puts(b, "block_id,sub_block_id,aic_time(us),aic_total_cycles,aic_cube_time(us),aic_cube_ratio,"
                  "aic_scalar_time(us),aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),"
                  "aic_mte2_ratio,aic_fixpipe_time(us),aic_fixpipe_ratio,aiv_time(us),aiv_total_cycles,"
                  "aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),"
                  "aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio\n");
  static const int aic_pipes[] = {CORE_PIPE_M, CORE_PIPE_S, CORE_PIPE_MTE1, CORE_PIPE_MTE2, CORE_PIPE_FIX};
  static const int aiv_pipes[] = {CORE_PIPE_V, CORE_PIPE_S, CORE_PIPE_MTE2, CORE_PIPE_MTE3};
  bool coupled = m->chip->org != ARCH_ORG_SPLIT;
  for (int i = 0; i < m->ncores; i++) {
    const struct core_out *c = &m->cores[i];
    if (!c->used) continue;
    const char *sub = strchr(c->name, '.') + 1;
    npu_buf_printf(b, "%d,%s", c->unit, sub);
    double t = c->end_s;
    bool aic = c->kind == 0, aiv = c->kind == 1 || coupled;
    if (aic) {
      put_time(b, t);
      npu_buf_printf(b, ",%.0f", t * m->chip->clock_hz);
      for (size_t k = 0; k < sizeof aic_pipes / sizeof *aic_pipes; k++) {
        put_time(b, c->busy[aic_pipes[k]]);
        put_ratio(b, c->busy[aic_pipes[k]], t);
      }
    } else {
      for (int k = 0; k < 12; k++) npu_buf_puts(b, ",N/A");
    }
    if (aiv) {
      put_time(b, t);
      npu_buf_printf(b, ",%.0f", t * m->chip->clock_hz);
      for (size_t k = 0; k < sizeof aiv_pipes / sizeof *aiv_pipes; k++) {
        /* a coupled core's scalar and MTE2 are counted once, on the cube side */
        double busy = coupled && (aiv_pipes[k] == CORE_PIPE_S || aiv_pipes[k] == CORE_PIPE_MTE2) ? 0 : c->busy[aiv_pipes[k]];
        put_time(b, busy);
        put_ratio(b, busy, t);
      }
    } else {
      for (int k = 0; k < 10; k++) npu_buf_puts(b, ",N/A");
    }
    npu_buf_puts(b, "\n");
  }
}

/* OpBasicInfo.csv: one row per kernel launch. Task Duration is the device-side time of the
 * body (first instruction to last completion), without the launch overhead, which has a column
 * of its own. */
static void op_basic_info(const struct mc_msprof *m, const char *op, struct npu_buf *b)
{
  npu_buf_puts(b, "Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq,"
                  "Launch Overhead(us)\n");
  double mhz = m->chip->clock_hz / 1e6;
  for (int i = 0; i < m->nlaunches; i++) {
    const struct launch *l = &m->launches[i];
    npu_buf_printf(b, "%s_%d,%s", op, i, op);
    put_time(b, l->end_s);
    npu_buf_printf(b, ",%d", l->nunits);
    if (l->aic && l->aiv) npu_buf_printf(b, ",%d", l->aiv);
    else npu_buf_puts(b, ",N/A");
    npu_buf_printf(b, ",0,0,%.0f,%.0f", mhz, mhz);
    put_time(b, m->chip->launch_overhead_s);
    npu_buf_puts(b, "\n");
  }
}

/* core<...>_instr_exe.csv */
static void instr_exe(const struct mc_msprof *m, const struct core_out *c, struct npu_buf *b)
{
  npu_buf_puts(b, "instr,addr,pipe,call_count,cycles,running_time(us),detail,bytes,repeat\n");
  for (size_t i = 0; i < c->nforms; i++) {
    const struct form *f = &c->forms[i];
    npu_buf_printf(b, "%s,0x%zx,%s,%" PRIu64 ",%.0f", f->name, i, pipe_track[f->pipe], f->calls,
                   f->time_s * m->chip->clock_hz);
    put_time(b, f->time_s);
    npu_buf_puts(b, ",");
    npu_csv_field(b, f->detail);
    npu_buf_printf(b, ",%" PRIu64 ",%" PRIu64 "\n", f->bytes, f->repeat);
  }
}

static int write_whole(const char *path, const struct npu_buf *b)
{
  FILE *f = fopen(path, "w");
  if (!f) return errno;
  bool ok = fwrite(npu_buf_str(b), 1, b->len, f) == b->len;
  int e = errno;
  if (fclose(f) != 0 && ok) return errno ? errno : EIO;
  return ok ? 0 : (e ? e : EIO);
}

static int write_table(const struct mc_msprof *m, const char *file, const char *op,
                       void (*fn)(const struct mc_msprof *, const char *, struct npu_buf *), struct npu_diag *diag)
{
  struct npu_buf b = {0};
  fn(m, op, &b);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", m->tmp, file);
  int e = write_whole(path, &b);
  npu_buf_release(&b);
  if (e) return npu_diag_set(diag, path, 0, "--msprof", "cannot write: %s", strerror(e)), NPU_EIO;
  return 0;
}

int mc_msprof_close(struct mc_msprof *m, const char *op, struct npu_diag *diag)
{
  int rc = 0;
  if (m->err) {
    rc = NPU_EIO;
    npu_diag_set(diag, m->err_path, 0, "--msprof", "cannot write: %s", strerror(m->err));
  }
  struct npu_trace names = {0};
  for (int i = 0; i < m->ncores && !rc; i++) {
    struct core_out *c = &m->cores[i];
    if (!c->used) continue;
    name_tracks(&names, c, i);
    struct npu_trace own = {0};
    name_tracks(&own, c, i);
    rc = rpt_trace_file_close(c->trace, &own, diag);
    c->trace = NULL;
    npu_trace_release(&own);
    struct npu_buf b = {0};
    instr_exe(m, c, &b);
    char path[4096];
    snprintf(path, sizeof path, "%s/simulator/%s/%s_instr_exe.csv", m->tmp, c->name, c->name);
    int e = rc ? 0 : write_whole(path, &b);
    npu_buf_release(&b);
    if (e) rc = (npu_diag_set(diag, path, 0, "--msprof", "cannot write: %s", strerror(e)), NPU_EIO);
  }
  if (!rc) rc = rpt_trace_file_close(m->summary, &names, diag);
  if (!rc) m->summary = NULL;
  npu_trace_release(&names);
  if (!rc) rc = write_table(m, "PipeUtilization.csv", op, pipe_utilization, diag);
  if (!rc) rc = write_table(m, "OpBasicInfo.csv", op, op_basic_info, diag);
  if (!rc && rename(m->tmp, m->dir) != 0)
    rc = (npu_diag_set(diag, m->dir, 0, "--msprof", "cannot move the output into place: %s", strerror(errno)), NPU_EIO);
  if (rc) {
    mc_msprof_abort(m);
    return rc;
  }
  free(m->tmp);
  m->tmp = NULL;
  mc_msprof_abort(m);
  return 0;
}

/* Remove the partial tree: its files are ours, two levels deep at most. */
static void remove_tree(const char *path)
{
  DIR *d = opendir(path);
  if (!d) {
    unlink(path);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
    remove_tree(sub);
  }
  closedir(d);
  rmdir(path);
}

void mc_msprof_abort(struct mc_msprof *m)
{
  if (!m) return;
  rpt_trace_file_abort(m->summary);
  for (int i = 0; i < m->ncores; i++) {
    rpt_trace_file_abort(m->cores[i].trace);
    free(m->cores[i].forms);
  }
  if (m->tmp) remove_tree(m->tmp);
  for (int i = 0; i < m->nlaunches; i++) {
    free(m->launches[i].units);
    free(m->launches[i].core_seen);
  }
  free(m->launches);
  free(m->cores);
  free(m->dir);
  free(m->tmp);
  npu_buf_release(&m->ev);
  free(m);
}
