/*
 * strutil.h - small string helpers: edit distance for "did you mean" suggestions, and a
 * growable string buffer for building output before it is written (so a failing command
 * writes nothing).
 */
#ifndef NPUSIM_COMMON_STRUTIL_H
#define NPUSIM_COMMON_STRUTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Levenshtein distance between a and b (insert, delete, substitute cost 1). */
size_t npu_edit_distance(const char *a, const char *b);

/*
 * The candidate closest to word, or NULL if none is close enough to be a plausible typo:
 * distance at most max(2, strlen(word)/3). Ties go to the earliest candidate. candidates has n
 * entries; NULL entries are skipped.
 */
const char *npu_suggest(const char *word, const char *const *candidates, size_t n);

/* Append printf-style text to the NUL-terminated string in buf (size bytes), truncating. */
void npu_appendf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Growable NUL-terminated string. Zero-initialise ({0}) before use; npu_buf_release frees. */
struct npu_buf {
  char *data; /* NUL-terminated contents, or NULL while empty */
  size_t len; /* bytes used, without the NUL */
  size_t cap; /* bytes allocated */
};
void npu_buf_printf(struct npu_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void npu_buf_vprintf(struct npu_buf *b, const char *fmt, va_list ap);
void npu_buf_puts(struct npu_buf *b, const char *s);
/* Append n bytes of p as they are (NULs included; the buffer stays NUL-terminated). */
void npu_buf_append(struct npu_buf *b, const void *p, size_t n);
/* Append the whole file at path; false (errno set) when it cannot be opened or read. */
bool npu_buf_read_file(struct npu_buf *b, const char *path);
/* Append s as one CSV field: as is, or quoted (quotes doubled) when it holds a comma, a quote or
 * a line break; line breaks become spaces, so a row stays on one line. */
void npu_csv_field(struct npu_buf *b, const char *s);
void npu_buf_release(struct npu_buf *b);
/* The contents, "" when empty; valid until the next change. */
const char *npu_buf_str(const struct npu_buf *b);

/* Copy src into dst[n], always NUL-terminated. Returns false if src was truncated. */
int npu_strlcpy(char *dst, const char *src, size_t n);

#endif
