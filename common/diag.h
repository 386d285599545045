/*
 * diag.h - located diagnostics for bad input.
 *
 * Loaders fill a struct npu_diag with the file, line, key and a message (git style: lowercase,
 * problem first, quoted subject). The CLI prints it as "error: FILE:LINE: KEY: MESSAGE" and
 * exits with status 2. A diagnostic is plain data: no allocation, safe to copy.
 */
#ifndef NPUSIM_COMMON_DIAG_H
#define NPUSIM_COMMON_DIAG_H

#include <stdio.h>

struct npu_diag {
  char file[512]; /* where the bad input is: a path, or "command line"; "" if none */
  int line;       /* 1-based line in file; 0 if none */
  char key[256];  /* dotted configuration key, e.g. "chip.hbm.bandwidth"; "" if none */
  char msg[1024]; /* what is wrong, lowercase, no trailing period */
};

/* Reset to empty. */
void npu_diag_clear(struct npu_diag *d);

/*
 * Fill d (which may be NULL: then nothing happens). file and key may be NULL. Long texts are
 * truncated. Returns NPU_ECONFIG so a loader can write "return npu_diag_set(...)".
 */
int npu_diag_set(struct npu_diag *d, const char *file, int line, const char *key,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Render as "FILE:LINE: KEY: MESSAGE" (parts that are empty are left out) into buf. */
void npu_diag_format(const struct npu_diag *d, char *buf, size_t n);

/* Print "error: " + npu_diag_format + newline to f. */
void npu_diag_print(FILE *f, const struct npu_diag *d);

#endif
