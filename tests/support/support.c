/* support.c - scratch files and subprocess capture for tests. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/support/support.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *ts_tmpdir(void)
{
  const char *base = getenv("TMPDIR");
  if (!base || !base[0]) base = "/tmp";
  size_t n = strlen(base) + 32;
  char *p = malloc(n);
  snprintf(p, n, "%s/npusim-test-XXXXXX", base);
  cr_assert(mkdtemp(p) != NULL, "mkdtemp failed");
  return p;
}

char *ts_write(const char *dir, const char *name, const char *text)
{
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  cr_assert(f != NULL, "cannot write %s", p);
  fputs(text, f);
  fclose(f);
  return p;
}

char *ts_read(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t k;
  while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += k;
    if (cap - len < 2) buf = realloc(buf, cap *= 2);
  }
  buf[len] = '\0';
  fclose(f);
  return buf;
}

static char *slurp_fd(int fd)
{
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  ssize_t k;
  while ((k = read(fd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)k;
    if (cap - len < 2) buf = realloc(buf, cap *= 2);
  }
  buf[len] = '\0';
  return buf;
}

struct run_result ts_run(char *const argv[], const char *extra_env)
{
  char *dir = ts_tmpdir();
  char outp[512], errp[512];
  snprintf(outp, sizeof outp, "%s/stdout", dir);
  snprintf(errp, sizeof errp, "%s/stderr", dir);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0, "fork failed");
  if (pid == 0) {
    int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(127);
    dup2(o, 1);
    dup2(e, 2);
    if (extra_env) putenv((char *)extra_env);
    execv(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  struct run_result r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  int fo = open(outp, O_RDONLY), fe = open(errp, O_RDONLY);
  r.out = slurp_fd(fo);
  r.err = slurp_fd(fe);
  close(fo);
  close(fe);
  ts_rmtree(dir);
  free(dir);
  return r;
}

struct run_result ts_npusim(const char *arg, ...)
{
  char *argv[33];
  int n = 0;
  argv[n++] = (char *)NPUSIM_BINARY;
  va_list ap;
  va_start(ap, arg);
  for (const char *a = arg; a; a = va_arg(ap, const char *)) {
    cr_assert(n < 32, "ts_npusim takes at most 31 arguments"); /* never cut silently */
    argv[n++] = (char *)a;
  }
  va_end(ap);
  argv[n] = NULL;
  return ts_run(argv, NULL);
}

struct run_result ts_npusim_argv(const char *const *args)
{
  char *argv[33];
  int n = 0;
  argv[n++] = (char *)NPUSIM_BINARY;
  for (int i = 0; args[i]; i++) {
    cr_assert(n < 32, "ts_npusim_argv takes at most 31 arguments");
    argv[n++] = (char *)args[i];
  }
  argv[n] = NULL;
  return ts_run(argv, NULL);
}

char *ts_html_page(const char *scenario, const char *page, const char *set)
{
  struct run_result r = set ? ts_npusim("run", scenario, "--html", page, "--set", set, NULL)
                            : ts_npusim("run", scenario, "--html", page, NULL);
  cr_assert_eq(r.status, 0, "%s: %s", scenario, r.err);
  ts_run_free(&r);
  char *html = ts_read(page);
  cr_assert(html != NULL, "%s: no page", page);
  cr_assert(!strncmp(html, "<!DOCTYPE html>\n", 16) && strstr(html, "</html>\n"), "%s", html);
  cr_assert(!strstr(html, "http:") && !strstr(html, "https:") && !strstr(html, "<script") && !strstr(html, "<link"),
            "self-contained: %s", html);
  return html;
}

void ts_run_free(struct run_result *r)
{
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void ts_rmtree(const char *dir)
{
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

size_t ts_count(const char *s, const char *needle)
{
  size_t n = 0, m = strlen(needle), len = strlen(s);
  for (size_t i = 0; i + m <= len; i++)
    if (s[i] == needle[0] && !memcmp(s + i, needle, m)) {
      n++;
      i += m - 1;
    }
  return n;
}
