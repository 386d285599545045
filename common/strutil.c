/* strutil.c - edit distance, suggestions, growable strings. */
#include "common/strutil.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "common/err.h"

size_t npu_edit_distance(const char *a, const char *b)
{
  size_t la = strlen(a), lb = strlen(b);
  size_t *row = npu_xmalloc((lb + 1) * sizeof *row);
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  size_t d = row[lb];
  free(row);
  return d;
}

const char *npu_suggest(const char *word, const char *const *candidates, size_t n)
{
  size_t limit = strlen(word) / 3;
  if (limit < 2) limit = 2;
  const char *best = NULL;
  size_t best_d = limit + 1;
  for (size_t i = 0; i < n; i++) {
    if (!candidates[i]) continue;
    size_t d = npu_edit_distance(word, candidates[i]);
    if (d < best_d) {
      best_d = d;
      best = candidates[i];
    }
  }
  return best;
}

/* Room for `more` bytes and the NUL after the contents. */
static void buf_reserve(struct npu_buf *b, size_t more)
{
  if (b->len + more + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + more + 1) cap *= 2;
  b->data = npu_xrealloc(b->data, cap);
  b->cap = cap;
}

void npu_buf_vprintf(struct npu_buf *b, const char *fmt, va_list ap)
{
  va_list ap2;
  va_copy(ap2, ap);
  int need = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  NPU_ASSERT(need >= 0);
  buf_reserve(b, (size_t)need);
  vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
  b->len += (size_t)need;
}

void npu_buf_append(struct npu_buf *b, const void *p, size_t n)
{
  buf_reserve(b, n);
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
}

bool npu_buf_read_file(struct npu_buf *b, const char *path)
{
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char chunk[65536];
  size_t k;
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) npu_buf_append(b, chunk, k);
  bool ok = !ferror(f);
  fclose(f);
  if (!b->data) npu_buf_append(b, "", 0); /* an empty file reads as "" */
  return ok;
}

void npu_buf_printf(struct npu_buf *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  npu_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void npu_buf_puts(struct npu_buf *b, const char *s)
{
  npu_buf_printf(b, "%s", s);
}

void npu_buf_release(struct npu_buf *b)
{
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

const char *npu_buf_str(const struct npu_buf *b)
{
  return b->data ? b->data : "";
}

int npu_strlcpy(char *dst, const char *src, size_t n)
{
  size_t len = strlen(src);
  if (len < n) {
    memcpy(dst, src, len + 1);
    return 1;
  }
  if (n) {
    memcpy(dst, src, n - 1);
    dst[n - 1] = '\0';
  }
  return 0;
}

void npu_csv_field(struct npu_buf *out, const char *s)
{
  if (!strpbrk(s, ",\"\n\r")) {
    npu_buf_puts(out, s);
    return;
  }
  npu_buf_puts(out, "\"");
  for (; *s; s++) {
    if (*s == '"') npu_buf_puts(out, "\"\"");
    else if (*s == '\n' || *s == '\r') npu_buf_puts(out, " ");
    else npu_buf_printf(out, "%c", *s);
  }
  npu_buf_puts(out, "\"");
}

void npu_appendf(char *buf, size_t size, const char *fmt, ...)
{
  size_t l = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + l, l < size ? size - l : 0, fmt, ap);
  va_end(ap);
}
