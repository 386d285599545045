/*
 * exec.c - running a sweep: the journal, resuming, progress, the final CSV; see sweep.h.
 *
 * The journal OUT.journal starts with a header (magic, the sweep's fingerprint, the point count,
 * the shard, the CSV header) and gets one line per finished point, "INDEX<TAB>CRC<TAB>ROW",
 * appended and fsync'd as the point finishes. Reading it back stops at the first line that is
 * not whole (no newline, bad checksum): that is a write a kill interrupted, and it is cut off.
 * When every point has a row, OUT is written (rows in point order) next to it and renamed into
 * place, so OUT is always either absent, the previous complete file, or the new complete one.
 */
#define _DEFAULT_SOURCE /* flock */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fdio.h"
#include "sweep/mpi.h"
#include "sweep/sweep.h"

#define JOURNAL_MAGIC "npusim-sweep-journal 1"

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint32_t crc32(const char *s, size_t n)
{
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= (unsigned char)s[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

/* ------------------------------------------------------------ CSV */

int sw_csv_split(const char *line, char ***fields)
{
  int n = 0, cap = 16;
  char **f = npu_xmalloc((size_t)cap * sizeof *f);
  const char *p = line;
  for (;;) {
    struct npu_buf b = {0};
    if (*p == '"') {
      p++;
      while (*p) {
        if (*p == '"' && p[1] == '"') {
          npu_buf_puts(&b, "\"");
          p += 2;
        } else if (*p == '"') {
          p++;
          break;
        } else {
          npu_buf_printf(&b, "%c", *p++);
        }
      }
    }
    while (*p && *p != ',' && *p != '\n' && *p != '\r') npu_buf_printf(&b, "%c", *p++);
    if (n == cap) f = npu_xrealloc(f, (size_t)(cap *= 2) * sizeof *f);
    f[n++] = npu_xstrdup(npu_buf_str(&b));
    npu_buf_release(&b);
    if (*p != ',') break;
    p++;
  }
  *fields = f;
  return n;
}

void sw_csv_free(char **fields, int n)
{
  for (int i = 0; i < n; i++) free(fields[i]);
  free(fields);
}

/* ------------------------------------------------------------ files */

static void fsync_dir(const char *path)
{
  char dir[4096];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

/* Write a whole file durably: a temporary next to it, fsync'd, renamed into place. */
static int write_durable(const char *path, const char *text, size_t n, struct npu_diag *diag)
{
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
  if (fd < 0) return npu_diag_set(diag, path, 0, NULL, "cannot write: %s", strerror(errno)), NPU_EIO;
  bool ok = npu_write_all(fd, text, n) && fsync(fd) == 0;
  ok &= close(fd) == 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return npu_diag_set(diag, path, 0, NULL, "cannot write: %s", strerror(e)), NPU_EIO;
  }
  fsync_dir(path);
  return 0;
}

static char *slurp(const char *path, size_t *len)
{
  struct npu_buf b = {0};
  if (!npu_buf_read_file(&b, path)) {
    npu_buf_release(&b);
    return NULL;
  }
  *len = b.len;
  return b.data;
}

/* ------------------------------------------------------------ the run */

struct run {
  struct sw_spec *s;
  const struct sw_exec_options *o;
  char journal[4200];
  int jfd;
  char **rows;         /* per point: its row, or NULL */
  enum sw_status *st;
  bool *mine;          /* in this shard */
  int total, done;
  struct sw_result *res;
  double t0, last_print;
  int printed_done, printed_tenth; /* plain progress: what the last line said */
  bool tty;
  int ranks;
  struct npu_diag *diag;
  int io_rc;
};

static void count_by(struct sw_result *res, enum sw_status st, int by)
{
  switch (st) {
  case SW_OK: res->ok += by; break;
  case SW_ERROR: res->error += by; break;
  case SW_CRASH: res->crash += by; break;
  case SW_TIMEOUT: res->timeout += by; break;
  }
}

static void count(struct sw_result *res, enum sw_status st)
{
  count_by(res, st, 1);
}

static void header_text(const struct run *r, struct npu_buf *h)
{
  npu_buf_printf(h, "%s\nfingerprint %016llx points %d shard %d/%d\nsweep %s\n", JOURNAL_MAGIC,
                 (unsigned long long)r->s->fingerprint, r->s->npoints, r->o->shard_n ? r->o->shard_i : 0,
                 r->o->shard_n ? r->o->shard_n : 1, r->s->path[0] ? r->s->path : "(batch)");
  sw_csv_header(r->s, h);
  npu_buf_puts(h, "\n");
}

/* Take the journal's rows; refuse a journal of another sweep unless --force. */
static int open_journal(struct run *r)
{
  const struct sw_exec_options *o = r->o;
  snprintf(r->journal, sizeof r->journal, "%s.journal", o->csv);
  struct npu_buf want = {0};
  header_text(r, &want);
  int rc = 0;
  struct stat st;
  bool have = stat(r->journal, &st) == 0;
  if (have && o->force) {
    unlink(r->journal);
    have = false;
  }
  if (!have && !o->force && stat(o->csv, &st) == 0) {
    rc = npu_diag_set(r->diag, o->csv, 0, NULL,
                      "the results file exists without its journal (%s): use --force to overwrite it, or another -o",
                      r->journal);
    rc = NPU_ECONFIG;
    goto out;
  }
  if (!have) {
    rc = write_durable(r->journal, npu_buf_str(&want), want.len, r->diag);
    if (rc) goto out;
  }
  r->jfd = open(r->journal, O_RDWR | O_APPEND);
  if (r->jfd < 0) {
    rc = (npu_diag_set(r->diag, r->journal, 0, NULL, "cannot open: %s", strerror(errno)), NPU_EIO);
    goto out;
  }
  if (flock(r->jfd, LOCK_EX | LOCK_NB) != 0) {
    rc = npu_diag_set(r->diag, o->csv, 0, NULL, "another sweep is writing this results file (%s is locked)",
                      r->journal);
    rc = NPU_ECONFIG;
    goto out;
  }
  size_t len;
  char *text = slurp(r->journal, &len);
  if (!text) {
    rc = (npu_diag_set(r->diag, r->journal, 0, NULL, "cannot read: %s", strerror(errno)), NPU_EIO);
    goto out;
  }
  if (len < want.len || memcmp(text, npu_buf_str(&want), want.len) != 0) {
    bool ours = !strncmp(text, JOURNAL_MAGIC "\n", strlen(JOURNAL_MAGIC) + 1);
    rc = npu_diag_set(r->diag, o->csv, 0, NULL,
                      ours ? "the sweep changed since this results file was started (%s differs from its journal "
                             "%s): use --force to start over, or another -o"
                           : "%s: %s is not a sweep journal: use --force to overwrite it, or another -o",
                      r->s->path[0] ? r->s->path : "the batch", r->journal);
    rc = NPU_ECONFIG;
    free(text);
    goto out;
  }
  /* rows: stop at the first line that is not whole */
  size_t off = want.len, good = off;
  int line = 5, dropped = 0;
  while (off < len) {
    char *nl = memchr(text + off, '\n', len - off);
    if (!nl) {
      dropped = 1;
      break;
    }
    *nl = '\0';
    char *l = text + off;
    char *t1 = strchr(l, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    char *end;
    long idx = strtol(l, &end, 10);
    bool ok = t1 && t2 && end == t1 && idx >= 0 && idx < r->total;
    if (ok) {
      unsigned long crc = strtoul(t1 + 1, &end, 16);
      ok = end == t2 && crc == crc32(t2 + 1, strlen(t2 + 1));
    }
    if (!ok) {
      dropped = 1;
      break;
    }
    if (r->mine[idx]) {
      char **f;
      int nf = sw_csv_split(t2 + 1, &f);
      int sc = 1 + r->s->ncolumns;
      int stv = nf > sc ? sw_status_parse(f[sc]) : -1;
      enum sw_status rst = stv < 0 ? SW_ERROR : (enum sw_status)stv;
      sw_csv_free(f, nf);
      if (r->rows[idx]) { /* a later row of the point (a retried one) replaces the earlier */
        count_by(r->res, r->st[idx], -1);
        free(r->rows[idx]);
        r->rows[idx] = NULL;
        r->done--;
        r->res->resumed--;
      }
      if (rst == SW_OK || !r->o->retry_failed) {
        r->rows[idx] = npu_xstrdup(t2 + 1);
        r->st[idx] = rst;
        r->done++;
        r->res->resumed++;
        count(r->res, rst);
      }
    }
    off = (size_t)(nl - text) + 1;
    good = off;
    line++;
  }
  free(text);
  if (dropped) {
    fprintf(stderr, "sweep: %s: dropped a half-written row at line %d (the point runs again)\n", r->journal, line);
    if (ftruncate(r->jfd, (off_t)good) != 0 || fsync(r->jfd) != 0) {
      rc = (npu_diag_set(r->diag, r->journal, 0, NULL, "cannot truncate: %s", strerror(errno)), NPU_EIO);
      goto out;
    }
  }
out:
  npu_buf_release(&want);
  return rc;
}

static void fmt_clock(double s, char *buf, size_t n)
{
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress(struct run *r, bool final)
{
  double t = now_s();
  int ran = r->res->ran;
  int left = r->total - r->done;
  char el[32], eta[32] = "-";
  fmt_clock(t - r->t0, el, sizeof el);
  if (ran > 0) fmt_clock((t - r->t0) / ran * left, eta, sizeof eta);
  int bad = r->res->error + r->res->crash + r->res->timeout;
  if (r->tty) {
    if (!final && t - r->last_print < 0.2) return;
    r->last_print = t;
    int w = 30, fill = r->total ? (int)((double)w * r->done / r->total) : w;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = '\0';
    fprintf(stderr, "\r[%s] %d/%d points", bar, r->done, r->total);
    if (bad) fprintf(stderr, ", %d failed", bad);
    fprintf(stderr, ", %s elapsed, ETA %s   %s", el, eta, final ? "\n" : "");
    fflush(stderr);
    return;
  }
  /* plain lines: when another tenth of the sweep is done or 10 s passed with progress, and at the end */
  int tenth = r->total ? 10 * r->done / r->total : 10;
  if (!final && (r->done == r->printed_done || r->done == r->total ||
                 (tenth == r->printed_tenth && t - r->last_print < 10)))
    return;
  r->last_print = t;
  r->printed_done = r->done;
  r->printed_tenth = tenth;
  fprintf(stderr, "sweep: %d/%d points done", r->done, r->total);
  if (bad) fprintf(stderr, " (%d failed)", bad);
  fprintf(stderr, ", %s elapsed, ETA %s\n", el, final ? "0:00" : eta);
}

static void record(void *ctx, int index, enum sw_status st, const char *row)
{
  struct run *r = ctx;
  if (index < 0 || index >= r->total || r->rows[index]) return;
  r->rows[index] = npu_xstrdup(row);
  r->st[index] = st;
  r->done++;
  r->res->ran++;
  count(r->res, st);
  if (r->jfd >= 0 && !r->io_rc) {
    struct npu_buf l = {0};
    npu_buf_printf(&l, "%d\t%08lx\t%s\n", index, (unsigned long)crc32(row, strlen(row)), row);
    if (!npu_write_all(r->jfd, npu_buf_str(&l), l.len) || fsync(r->jfd) != 0)
      r->io_rc = (npu_diag_set(r->diag, r->journal, 0, NULL, "cannot append: %s", strerror(errno)), NPU_EIO);
    npu_buf_release(&l);
  }
  if (st != SW_OK && !r->tty) {
    char **f;
    int nf = sw_csv_split(row, &f);
    fprintf(stderr, "sweep: point %d: %s: %s\n", index, sw_status_name(st), nf ? f[nf - 1] : "");
    sw_csv_free(f, nf);
  }
  progress(r, false);
}

static int write_csv(struct run *r)
{
  struct npu_buf b = {0};
  sw_csv_header(r->s, &b);
  npu_buf_puts(&b, "\n");
  for (int i = 0; i < r->total; i++)
    if (r->mine[i]) npu_buf_printf(&b, "%s\n", r->rows[i]);
  int rc = write_durable(r->o->csv, npu_buf_str(&b), b.len, r->diag);
  npu_buf_release(&b);
  return rc;
}

int sw_execute(struct sw_spec *s, const struct sw_exec_options *o, struct sw_result *res, struct npu_diag *diag)
{
  memset(res, 0, sizeof *res);
  res->ranks = 1;
  int rank = 0, size = 1;
  if (o->mpi) {
    int rc = sw_mpi_init(&rank, &size, diag);
    if (rc) return rc;
    res->ranks = size;
  }
  struct run r = {.s = s, .o = o, .jfd = -1, .res = res, .diag = diag, .total = s->npoints};
  r.t0 = now_s();
  r.tty = isatty(STDERR_FILENO) && rank == 0;
  r.ranks = size;
  r.rows = npu_xcalloc((size_t)r.total + 1, sizeof *r.rows);
  r.st = npu_xcalloc((size_t)r.total + 1, sizeof *r.st);
  r.mine = npu_xcalloc((size_t)r.total + 1, sizeof *r.mine);
  int mine = 0;
  for (int i = 0; i < r.total; i++) {
    r.mine[i] = !o->shard_n || i % o->shard_n == o->shard_i;
    mine += r.mine[i];
  }
  int rc = 0;
  if (rank == 0) {
    /* the points not mine count as done */
    r.done = r.total - mine;
    if (o->journal) rc = open_journal(&r);
  }
  if (o->mpi) {
    rc = sw_mpi_agree(rc);
    if (rc && rank != 0) npu_diag_set(diag, NULL, 0, NULL, "rank 0 failed to start the sweep");
  }
  if (rc) goto out;
  if (rank != 0) {
    rc = sw_mpi_worker(s, o);
    goto out;
  }
  res->total = mine;
  if (!r.tty && !o->mpi && o->journal)
    fprintf(stderr, "sweep: %d points to run%s%.0d%s, %d at a time\n", mine - res->resumed,
            res->resumed ? " (" : "", res->resumed, res->resumed ? " more in the journal)" : "", o->jobs);
  struct sw_pool *pool = sw_pool_create(s, o->jobs, o->timeout_s);
  int next = 0, workers = size - 1;
  int outstanding = 0; /* points handed to other ranks, no row yet */
  while (!r.io_rc && (r.done < r.total || workers > 0)) {
    while (sw_pool_free(pool) > 0) {
      while (next < r.total && (r.rows[next] || !r.mine[next])) next++;
      if (next >= r.total) break;
      sw_pool_start(pool, next++);
    }
    sw_pool_wait(pool, o->mpi ? 2 : 200, record, &r);
    if (o->mpi) {
      struct sw_mpi_msg m;
      while (sw_mpi_poll(&m)) {
        if (m.bye) workers--;
        if (m.index >= 0) {
          outstanding--;
          record(&r, m.index, (enum sw_status)m.status, npu_buf_str(&m.row));
        }
        if (m.want) {
          while (next < r.total && (r.rows[next] || !r.mine[next])) next++;
          if (next < r.total) {
            sw_mpi_reply(m.src, next++);
            outstanding++;
          } else {
            sw_mpi_reply(m.src, -1);
          }
        }
        npu_buf_release(&m.row);
      }
    }
    progress(&r, false);
  }
  (void)outstanding;
  sw_pool_destroy(pool);
  if (r.io_rc) {
    rc = r.io_rc;
    goto out;
  }
  progress(&r, true);
  rc = write_csv(&r);
out:
  res->wall_s = now_s() - r.t0;
  if (r.jfd >= 0) close(r.jfd);
  for (int i = 0; i < r.total; i++) free(r.rows[i]);
  free(r.rows);
  free(r.st);
  free(r.mine);
  if (o->mpi) sw_mpi_finalize();
  return rc;
}
