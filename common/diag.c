/* diag.c - located diagnostics. */
#include "common/diag.h"

#include <stdarg.h>
#include <string.h>

#include "common/err.h"

void npu_diag_clear(struct npu_diag *d)
{
  memset(d, 0, sizeof *d);
}

static void copy_trunc(char *dst, size_t n, const char *src)
{
  if (!src) src = "";
  size_t len = strlen(src);
  if (len >= n) len = n - 1;
  memcpy(dst, src, len);
  dst[len] = '\0';
}

int npu_diag_set(struct npu_diag *d, const char *file, int line, const char *key,
                 const char *fmt, ...)
{
  if (!d) return NPU_ECONFIG;
  va_list ap;
  copy_trunc(d->file, sizeof d->file, file);
  d->line = line;
  copy_trunc(d->key, sizeof d->key, key);
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return NPU_ECONFIG;
}

void npu_diag_format(const struct npu_diag *d, char *buf, size_t n)
{
  size_t off = 0;
  buf[0] = '\0';
#define APPEND(...)                                                   \
  do {                                                                \
    if (off < n) {                                                    \
      int w = snprintf(buf + off, n - off, __VA_ARGS__);              \
      if (w > 0) off += (size_t)w;                                    \
    }                                                                 \
  } while (0)
  if (d->file[0] && d->line > 0)
    APPEND("%s:%d: ", d->file, d->line);
  else if (d->file[0])
    APPEND("%s: ", d->file);
  if (d->key[0]) APPEND("%s: ", d->key);
  APPEND("%s", d->msg);
#undef APPEND
}

void npu_diag_print(FILE *f, const struct npu_diag *d)
{
  char buf[2048];
  npu_diag_format(d, buf, sizeof buf);
  fprintf(f, "error: %s\n", buf);
}
