/* err.c - status messages, exit statuses, panic and checked allocation. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *npu_strerror(int err)
{
  switch (err) {
  case NPU_OK:
    return "success";
#define NPU__ERR_CASE(name, msg) \
  case NPU_E##name:              \
    return msg;
    NPU_ERRNO_MAP(NPU__ERR_CASE)
#undef NPU__ERR_CASE
  default:
    return "unknown error";
  }
}

int npu_exit_status(int err)
{
  if (err == NPU_OK) return 0;
  if (err == NPU_EINTERNAL || err == NPU_EIO) return 1;
  return 2;
}

_Noreturn void npu__panic(const char *file, int line, const char *fmt, ...)
{
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "npusim: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

void *npu__xmalloc(size_t n, const char *file, int line)
{
  void *p = malloc(n ? n : 1);
  if (!p) npu__panic(file, line, "out of memory allocating %zu bytes", n);
  return p;
}

void *npu__xcalloc(size_t count, size_t size, const char *file, int line)
{
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) npu__panic(file, line, "out of memory allocating %zu x %zu bytes", count, size);
  return p;
}

void *npu__xrealloc(void *p, size_t n, const char *file, int line)
{
  void *q = realloc(p, n ? n : 1);
  if (!q) npu__panic(file, line, "out of memory reallocating %zu bytes", n);
  return q;
}

char *npu__xstrdup(const char *s, const char *file, int line)
{
  size_t n = strlen(s) + 1;
  char *p = npu__xmalloc(n, file, line);
  memcpy(p, s, n);
  return p;
}

#ifdef NPUSIM_COVERAGE
void __gcov_dump(void);
#endif

_Noreturn void npu_child_exit(int status)
{
#ifdef NPUSIM_COVERAGE
  __gcov_dump();
#endif
  _exit(status);
}
