/*
 * err.h - status codes and abort-on-bug helpers shared by every npusim module.
 *
 * Status convention (libuv/libgit2 style): 0 is success, a negative enum npu_err is a failure.
 * The codes and their messages come from one X-macro table, NPU_ERRNO_MAP. Bugs and
 * out-of-memory are not status codes: they abort with file:line (NPU_ASSERT, npu_xmalloc).
 */
#ifndef NPUSIM_COMMON_ERR_H
#define NPUSIM_COMMON_ERR_H

#include <stddef.h>

/* XX(name, message). Input errors (exit status 2) come first, internal ones after. */
#define NPU_ERRNO_MAP(XX)                                          \
  XX(INVAL, "invalid input")                                       \
  XX(CONFIG, "bad configuration")                                  \
  XX(NOTFOUND, "not found")                                        \
  XX(UNSUPPORTED, "not supported by this architecture")            \
  XX(NOFIT, "does not fit")                                        \
  XX(IO, "input/output error")                                     \
  XX(INTERNAL, "internal error")

enum npu_err {
  NPU_OK = 0,
#define NPU__ERR_ENUM(name, msg) NPU_E##name,
  NPU__ERR_FIRST = -1000,
  NPU_ERRNO_MAP(NPU__ERR_ENUM)
#undef NPU__ERR_ENUM
};

/* Static message for a status code; "unknown error" for anything else. */
const char *npu_strerror(int err);

/* Process exit status for a status: 0 for NPU_OK, 2 for input errors, 1 otherwise. */
int npu_exit_status(int err);

/* Abort with file:line and a message. Never returns. */
/* A fork()ed child's end: _exit(status), its coverage counters written first in a coverage
 * build (NPUSIM_COVERAGE, scripts/coverage.sh), which _exit would otherwise lose. */
_Noreturn void npu_child_exit(int status);

_Noreturn void npu__panic(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define NPU_ASSERT(cond)                                                          \
  do {                                                                            \
    if (!(cond)) npu__panic(__FILE__, __LINE__, "assertion failed: %s", #cond);   \
  } while (0)

#define NPU_PANIC(...) npu__panic(__FILE__, __LINE__, __VA_ARGS__)

/* Allocation that cannot fail: out-of-memory aborts with the caller's file:line. */
void *npu__xmalloc(size_t n, const char *file, int line);
void *npu__xcalloc(size_t count, size_t size, const char *file, int line);
void *npu__xrealloc(void *p, size_t n, const char *file, int line);
char *npu__xstrdup(const char *s, const char *file, int line);
#define npu_xmalloc(n) npu__xmalloc((n), __FILE__, __LINE__)
#define npu_xcalloc(c, s) npu__xcalloc((c), (s), __FILE__, __LINE__)
#define npu_xrealloc(p, n) npu__xrealloc((p), (n), __FILE__, __LINE__)
#define npu_xstrdup(s) npu__xstrdup((s), __FILE__, __LINE__)

#endif
