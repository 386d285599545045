/*
 * nccl_table.c - reading nccl-tests' collective tables (and npusim collective's); see
 * nccl_table.h for the columns.
 */
#include "report/nccl_table.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/strutil.h"

#define MAX_FIELDS 24

/* Whether the n bytes at p hold word. */
static bool has(const char *p, size_t n, const char *word)
{
  size_t w = strlen(word);
  for (size_t i = 0; i + w <= n; i++)
    if (!strncmp(p + i, word, w)) return true;
  return false;
}

/* hccl_test's header line: "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | ..." */
static bool hccl_header(const char *p, size_t n)
{
  return has(p, n, "data_size") && has(p, n, "aveg_time");
}

bool nccl_table_sniff(const char *path)
{
  struct npu_buf b = {0};
  bool yes = false;
  if (npu_buf_read_file(&b, path))
    for (const char *p = npu_buf_str(&b); p && *p && !yes;) {
      const char *eol = strchr(p, '\n');
      size_t n = eol ? (size_t)(eol - p) : strlen(p);
      yes = (n && *p == '#' && has(p, n, "busbw")) || hccl_header(p, n);
      p = eol ? eol + 1 : p + n;
    }
  npu_buf_release(&b);
  return yes;
}

/* A whole number >= 0, all of s. */
static bool whole(const char *s, double *v)
{
  if (!isdigit((unsigned char)*s)) return false;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (*end || errno || x != floor(x)) return false;
  *v = x;
  return true;
}

/* A finite number >= 0, all of s. */
static bool nonneg(const char *s, double *v)
{
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(x) || x < 0) return false;
  *v = x;
  return true;
}

/* Split line (modified in place) at blanks; the field count. */
static int fields(char *line, char **f)
{
  int n = 0;
  for (char *p = strtok(line, " \t\r"); p && n < MAX_FIELDS; p = strtok(NULL, " \t\r")) f[n++] = p;
  return n;
}

static int bad_row(struct npu_diag *diag, const char *path, int line, const char *what)
{
  return npu_diag_set(diag, path, line, NULL,
                      "not a row of a collective's table (size count type redop root time algbw busbw ...): %s", what),
         NPU_EINVAL;
}

/* An nccl-tests (or npusim collective) row's fields after the size into r. */
static int nccl_row(char **f, int n, struct nccl_row *r, const char *path, struct npu_diag *diag)
{
  double root, x;
  if (n < 8) return bad_row(diag, path, r->line, "fewer than 8 fields");
  if (!whole(f[1], &r->count)) return bad_row(diag, path, r->line, "the count is not a whole number");
  if (strlen(f[2]) >= sizeof r->type || strlen(f[3]) >= sizeof r->redop)
    return bad_row(diag, path, r->line, "the type or the reduction is too long a word");
  if (!whole(f[4], &root) && strcmp(f[4], "-1")) return bad_row(diag, path, r->line, "the root is not a rank (or -1)");
  if (!nonneg(f[5], &r->time_us) || !nonneg(f[6], &r->algbw_gbps) || !nonneg(f[7], &r->busbw_gbps))
    return bad_row(diag, path, r->line, "time, algbw and busbw must be numbers >= 0");
  npu_strlcpy(r->type, f[2], sizeof r->type);
  npu_strlcpy(r->redop, f[3], sizeof r->redop);
  /* nccl-tests: #wrong (a count or N/A), then the in-place time, algbw, busbw, #wrong */
  if (n >= 12 && nonneg(f[9], &x) && nonneg(f[10], &x) && nonneg(f[11], &x)) nonneg(f[9], &r->ip_time_us);
  return 0;
}

/* An hccl_test row's fields after the size: the time and the algorithm bandwidth. */
static int hccl_row(char **f, int n, struct nccl_row *r, const char *path, struct npu_diag *diag)
{
  if (n < 3 || !nonneg(f[1], &r->time_us) || !nonneg(f[2], &r->algbw_gbps))
    return bad_row(diag, path, r->line, "hccl_test's rows are data_size aveg_time alg_bandwidth [check_result]");
  return 0;
}

int nccl_table_read(const char *path, struct nccl_table *t, struct npu_diag *diag)
{
  memset(t, 0, sizeof *t);
  struct npu_buf b = {0};
  if (!npu_buf_read_file(&b, path))
    return npu_buf_release(&b), npu_diag_set(diag, path, 0, NULL, "cannot read: %s", strerror(errno)), NPU_EINVAL;
  int rc = 0, cap = 0, lineno = 0;
  bool hccl = false; /* rows of hccl_test: data_size aveg_time alg_bandwidth check_result */
  char *text = b.data;
  for (char *p = text; p && *p && !rc;) {
    char *eol = strchr(p, '\n');
    if (eol) *eol = '\0';
    lineno++;
    char *f[MAX_FIELDS];
    double size;
    if (hccl_header(p, strlen(p))) hccl = true;
    for (char *q = p; hccl && *q; q++)
      if (*q == '|') *q = ' ';
    int n = *p == '#' ? 0 : fields(p, f);
    if (n > 0 && whole(f[0], &size)) { /* a row: anything else is a comment or a log line */
      struct nccl_row r = {.size = size, .ip_time_us = -1, .busbw_gbps = -1, .line = lineno};
      rc = hccl ? hccl_row(f, n, &r, path, diag) : nccl_row(f, n, &r, path, diag);
      for (int i = 0; i < t->n && !rc; i++)
        if (t->rows[i].size == r.size)
          rc = npu_diag_set(diag, path, lineno, NULL, "size %.0f B again (first at line %d)", r.size, t->rows[i].line);
      if (!rc) {
        if (t->n == cap) {
          cap = cap ? 2 * cap : 32;
          t->rows = npu_xrealloc(t->rows, (size_t)cap * sizeof *t->rows);
        }
        t->rows[t->n++] = r;
      }
    }
    p = eol ? eol + 1 : NULL;
  }
  if (!rc && t->n == 0)
    rc = npu_diag_set(diag, path, 0, NULL, "no rows of a collective's table (size count type redop root time ...)");
  npu_buf_release(&b);
  if (rc) nccl_table_free(t);
  return rc;
}

void nccl_table_free(struct nccl_table *t)
{
  free(t->rows);
  memset(t, 0, sizeof *t);
}
