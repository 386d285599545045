/*
 * pool.c - sweep points run in fork()ed children, a few at a time, with a timeout.
 *
 * Why fork and not fork/exec of npusim: the child already holds the parsed sweep and point, and
 * the code to run it; it starts its own SimGrid engine (one per process), writes a record into a
 * pipe and leaves with _exit. No binary to find, no re-parsing, about a millisecond per point,
 * as workloads/isolate.c does for `npusim validate`. The child asks the kernel to kill it if the
 * parent dies (PR_SET_PDEATHSIG), so a killed sweep leaves no points running behind it.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "common/err.h"
#include "common/fdio.h"
#include "sweep/sweep.h"

struct slot {
  bool used;
  pid_t pid;
  int fd;
  int index;
  double start;
  bool timed_out;
  struct npu_buf rec;
};

struct sw_pool {
  const struct sw_spec *s;
  int jobs;
  double timeout_s;
  struct slot *slots;
};

/* The record a child writes: a header, the message, the row. */
struct rec_hdr {
  int32_t status;
  uint32_t msglen, rowlen;
};

/* Append n raw bytes (NULs included) to b. */
static void append_raw(struct npu_buf *b, const void *data, size_t n)
{
  if (b->len + n + 1 > b->cap) {
    b->cap = (b->len + n + 1) * 2;
    b->data = npu_xrealloc(b->data, b->cap);
  }
  memcpy(b->data + b->len, data, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *sw_status_name(enum sw_status st)
{
  static const char *const names[] = {"ok", "error", "crash", "timeout"};
  return names[st];
}

int sw_status_parse(const char *s)
{
  for (int i = 0; i < 4; i++)
    if (!strcmp(s, sw_status_name((enum sw_status)i))) return i;
  return -1;
}

struct sw_pool *sw_pool_create(const struct sw_spec *s, int jobs, double timeout_s)
{
  struct sw_pool *p = npu_xcalloc(1, sizeof *p);
  p->s = s;
  p->jobs = jobs < 1 ? 1 : jobs;
  p->timeout_s = timeout_s;
  p->slots = npu_xcalloc((size_t)p->jobs, sizeof *p->slots);
  return p;
}

void sw_pool_destroy(struct sw_pool *p)
{
  if (!p) return;
  for (int i = 0; i < p->jobs; i++) {
    struct slot *sl = &p->slots[i];
    if (!sl->used) continue;
    kill(sl->pid, SIGKILL);
    npu_wait_child(sl->pid, NULL);
    close(sl->fd);
    npu_buf_release(&sl->rec);
  }
  free(p->slots);
  free(p);
}

int sw_pool_running(const struct sw_pool *p)
{
  int n = 0;
  for (int i = 0; i < p->jobs; i++) n += p->slots[i].used;
  return n;
}

int sw_pool_free(const struct sw_pool *p)
{
  return p->jobs - sw_pool_running(p);
}

/*
 * Test hook: NPUSIM_SWEEP_FAULT="crash:3,hang:5,sleep:7" makes the child of point 3 abort, the
 * child of point 5 hang (for --timeout) and point 7 wait a second before it runs, so tests can
 * check that a failing point does not stop a sweep and kill a sweep in the middle.
 */
static void fault_hook(int index)
{
  const char *f = getenv("NPUSIM_SWEEP_FAULT");
  if (!f) return;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", f);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(t, ':');
    if (!colon || atoi(colon + 1) != index) continue;
    *colon = '\0';
    if (!strcmp(t, "crash")) abort();
    if (!strcmp(t, "hang"))
      for (;;) pause();
    if (!strcmp(t, "exit")) _exit(3);
    if (!strcmp(t, "sleep")) sleep(1);
  }
}

static void child(const struct sw_spec *s, int index, int fd)
{
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int dn = open("/dev/null", O_WRONLY);
  if (dn >= 0) {
    dup2(dn, STDOUT_FILENO);
    close(dn);
  }
  fault_hook(index);
  const struct sw_point *pt = &s->points[index];
  struct npu_buf row = {0};
  struct npu_diag diag;
  npu_diag_clear(&diag);
  int rc = scn_run_row(s->kind, pt->scenario, pt->display, (const char *const *)pt->sets, pt->nsets, &row, &diag);
  char msg[2048] = "";
  if (rc) {
    npu_diag_format(&diag, msg, sizeof msg);
    if (!msg[0]) snprintf(msg, sizeof msg, "%s", npu_strerror(rc));
  }
  struct rec_hdr h = {rc, (uint32_t)strlen(msg), rc ? 0 : (uint32_t)row.len};
  bool ok = npu_write_all(fd, &h, sizeof h) && npu_write_all(fd, msg, h.msglen) &&
            npu_write_all(fd, npu_buf_str(&row), h.rowlen);
  close(fd);
  npu_child_exit(ok ? 0 : 1);
}

void sw_pool_start(struct sw_pool *p, int index)
{
  struct slot *sl = NULL;
  for (int i = 0; i < p->jobs && !sl; i++)
    if (!p->slots[i].used) sl = &p->slots[i];
  NPU_ASSERT(sl != NULL);
  int fds[2];
  if (pipe(fds)) NPU_PANIC("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) NPU_PANIC("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    /* siblings' pipes are not ours */
    for (int i = 0; i < p->jobs; i++)
      if (p->slots[i].used) close(p->slots[i].fd);
    child(p->s, index, fds[1]);
  }
  close(fds[1]);
  memset(sl, 0, sizeof *sl);
  sl->used = true;
  sl->pid = pid;
  sl->fd = fds[0];
  sl->index = index;
  sl->start = now_s();
}

/* Replace characters that would break a CSV line. */
static void one_line(char *s)
{
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

static int count_fields(const char *header)
{
  int n = 1;
  for (const char *c = header; *c; c++) n += *c == ',';
  return n;
}

/* The full CSV row of a finished child. */
static void finish(struct sw_pool *p, struct slot *sl, int wstatus, sw_done_fn done, void *ctx)
{
  const struct sw_spec *s = p->s;
  struct npu_buf row = {0};
  npu_buf_printf(&row, "%d", sl->index);
  for (int c = 0; c < s->ncolumns; c++) {
    npu_buf_puts(&row, ",");
    npu_csv_field(&row, s->points[sl->index].cells[c]);
  }
  const char *rec = sl->rec.data;
  struct rec_hdr h;
  bool complete = sl->rec.len >= sizeof h;
  if (complete) {
    memcpy(&h, rec, sizeof h);
    complete = sl->rec.len == sizeof h + h.msglen + h.rowlen;
  }
  enum sw_status st;
  char msg[2048] = "";
  const char *metrics = NULL;
  size_t mlen = 0;
  if (sl->timed_out) {
    st = SW_TIMEOUT;
    snprintf(msg, sizeof msg, "the point ran longer than --timeout %g s and was killed", p->timeout_s);
  } else if (complete) {
    st = h.status ? SW_ERROR : SW_OK;
    snprintf(msg, sizeof msg, "%.*s", (int)h.msglen, rec + sizeof h);
    metrics = rec + sizeof h + h.msglen;
    mlen = h.rowlen;
  } else if (WIFSIGNALED(wstatus)) {
    st = SW_CRASH;
    snprintf(msg, sizeof msg, "the point's process died with signal %d (%s)", WTERMSIG(wstatus),
             strsignal(WTERMSIG(wstatus)));
  } else {
    st = SW_CRASH;
    snprintf(msg, sizeof msg, "the point's process ended without a result (exit status %d)",
             WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  }
  one_line(msg);
  npu_buf_printf(&row, ",%s,", sw_status_name(st));
  if (st == SW_OK) {
    npu_buf_printf(&row, "%.*s", (int)mlen, metrics);
  } else {
    int n = count_fields(s->metric_header);
    for (int i = 1; i < n; i++) npu_buf_puts(&row, ",");
  }
  npu_buf_puts(&row, ",");
  npu_csv_field(&row, msg);
  int index = sl->index;
  close(sl->fd);
  npu_buf_release(&sl->rec);
  memset(sl, 0, sizeof *sl);
  done(ctx, index, st, npu_buf_str(&row));
  npu_buf_release(&row);
}

void sw_pool_wait(struct sw_pool *p, int ms, sw_done_fn done, void *ctx)
{
  struct pollfd pf[256];
  int map[256];
  int n = 0;
  double t = now_s();
  for (int i = 0; i < p->jobs && n < 256; i++) {
    struct slot *sl = &p->slots[i];
    if (!sl->used) continue;
    if (p->timeout_s > 0) {
      double left_ms = (sl->start + p->timeout_s - t) * 1e3;
      if (left_ms < ms) ms = left_ms < 0 ? 0 : (int)left_ms + 1;
    }
    pf[n].fd = sl->fd;
    pf[n].events = POLLIN;
    map[n++] = i;
  }
  if (n == 0) {
    if (ms > 0) poll(NULL, 0, ms);
    return;
  }
  int k = poll(pf, (nfds_t)n, ms);
  if (k < 0 && errno != EINTR) NPU_PANIC("poll: %s", strerror(errno));
  for (int j = 0; k > 0 && j < n; j++) {
    if (!(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    struct slot *sl = &p->slots[map[j]];
    char buf[8192];
    ssize_t r = read(sl->fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0) {
      append_raw(&sl->rec, buf, (size_t)r);
      continue;
    }
    int st = 0;
    npu_wait_child(sl->pid, &st);
    finish(p, sl, st, done, ctx);
  }
  if (p->timeout_s > 0) {
    t = now_s();
    for (int i = 0; i < p->jobs; i++) {
      struct slot *sl = &p->slots[i];
      if (!sl->used || t - sl->start < p->timeout_s) continue;
      sl->timed_out = true;
      kill(sl->pid, SIGKILL);
      int st = 0;
      npu_wait_child(sl->pid, &st);
      finish(p, sl, st, done, ctx);
    }
  }
}
