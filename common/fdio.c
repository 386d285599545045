/* fdio.c - EINTR-safe whole reads, writes and waits; see fdio.h. */
#include "common/fdio.h"

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

bool npu_read_all(int fd, void *buf, size_t n)
{
  char *p = buf;
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

bool npu_write_all(int fd, const void *buf, size_t n)
{
  const char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

pid_t npu_wait_child(pid_t pid, int *status)
{
  pid_t r;
  while ((r = waitpid(pid, status, 0)) < 0 && errno == EINTR) {
  }
  return r;
}
