/* trace_file.c - streaming Chrome trace files; see trace_file.h. */
#include "report/trace_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/err.h"
#include "report/chrome.h"

#define FLUSH_BYTES (1u << 20)

struct rpt_trace_file {
  char *path, *tmp, *key;
  FILE *f;        /* plain */
  gzFile gz;      /* or compressed */
  struct npu_buf buf;
  uint64_t count;
  int err;        /* errno of the first failed write, -1 for a zlib error; 0 while fine */
};

static void flush(struct rpt_trace_file *f)
{
  if (!f->buf.len) return;
  if (f->err) { /* the first error is reported at the close; later text is dropped with it */
    f->buf.len = 0;
    f->buf.data[0] = '\0';
    return;
  }
  if (f->gz) {
    if (gzwrite(f->gz, f->buf.data, (unsigned)f->buf.len) != (int)f->buf.len) f->err = errno ? errno : -1;
  } else if (fwrite(f->buf.data, 1, f->buf.len, f->f) != f->buf.len) {
    f->err = errno ? errno : EIO;
  }
  f->buf.len = 0;
  f->buf.data[0] = '\0';
}

static bool ends_with(const char *s, const char *tail)
{
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && !strcmp(s + n - m, tail);
}

int rpt_trace_file_open(struct rpt_trace_file **out, const char *path, const char *key, struct npu_diag *diag)
{
  *out = NULL;
  struct rpt_trace_file *f = npu_xcalloc(1, sizeof *f);
  size_t n = strlen(path) + 32;
  f->path = npu_xstrdup(path);
  f->key = npu_xstrdup(key);
  f->tmp = npu_xmalloc(n);
  snprintf(f->tmp, n, "%s.partial%ld", path, (long)getpid());
  errno = 0;
  if (ends_with(path, ".gz")) {
    f->gz = gzopen(f->tmp, "wb6");
    if (f->gz) gzbuffer(f->gz, 256u << 10);
  } else {
    f->f = fopen(f->tmp, "wb");
  }
  if (!f->gz && !f->f) {
    npu_diag_set(diag, path, 0, key, "cannot write the trace: %s", errno ? strerror(errno) : "cannot start gzip");
    rpt_trace_file_abort(f);
    return NPU_EIO;
  }
  npu_buf_puts(&f->buf, RPT_CHROME_HEAD);
  *out = f;
  return 0;
}

static void separate(struct rpt_trace_file *f)
{
  if (f->count++) npu_buf_append(&f->buf, ",\n", 2);
}

void rpt_trace_file_event(struct rpt_trace_file *f, const struct npu_trace_event *e)
{
  separate(f);
  rpt_chrome_event(&f->buf, e);
  if (f->buf.len >= FLUSH_BYTES) flush(f);
}

void rpt_trace_file_json(struct rpt_trace_file *f, const char *obj, size_t n)
{
  separate(f);
  npu_buf_append(&f->buf, obj, n);
  if (f->buf.len >= FLUSH_BYTES) flush(f);
}

uint64_t rpt_trace_file_count(const struct rpt_trace_file *f)
{
  return f->count;
}

static void sink(void *ctx, const struct npu_trace_event *e)
{
  rpt_trace_file_event(ctx, e);
}

void rpt_trace_file_attach(struct rpt_trace_file *f, struct npu_trace *t)
{
  t->sink = sink;
  t->sink_ctx = f;
}

static void destroy(struct rpt_trace_file *f)
{
  free(f->path);
  free(f->tmp);
  free(f->key);
  npu_buf_release(&f->buf);
  free(f);
}

int rpt_trace_file_close(struct rpt_trace_file *f, const struct npu_trace *tracks, struct npu_diag *diag)
{
  for (size_t i = 0; tracks && i < tracks->ntracks; i++) {
    separate(f);
    rpt_chrome_track(&f->buf, &tracks->tracks[i]);
    if (f->buf.len >= FLUSH_BYTES) flush(f);
  }
  npu_buf_puts(&f->buf, RPT_CHROME_TAIL);
  flush(f);
  int err = f->err;
  if (f->gz) {
    int zr = gzclose(f->gz);
    f->gz = NULL;
    if (!err && zr != Z_OK) err = zr == Z_ERRNO ? errno : -1;
  } else {
    if (fclose(f->f) != 0 && !err) err = errno ? errno : EIO;
    f->f = NULL;
  }
  if (!err && rename(f->tmp, f->path) != 0) err = errno;
  if (err) {
    npu_diag_set(diag, f->path, 0, f->key, "cannot write the trace: %s",
                 err > 0 ? strerror(err) : "compression failed");
    unlink(f->tmp);
    destroy(f);
    return NPU_EIO;
  }
  destroy(f);
  return 0;
}

void rpt_trace_file_abort(struct rpt_trace_file *f)
{
  if (!f) return;
  if (f->gz) gzclose(f->gz);
  else if (f->f) fclose(f->f);
  unlink(f->tmp);
  destroy(f);
}
