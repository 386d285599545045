/*
 * support.h - helpers shared by the Criterion test binaries: scratch directories, files, and
 * running the npusim binary with its output and exit status captured.
 */
#ifndef NPUSIM_TESTS_SUPPORT_H
#define NPUSIM_TESTS_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>

/* GCC defines __SANITIZE_ADDRESS__ under -fsanitize=address (the sanitizer build). */
#ifdef __SANITIZE_ADDRESS__
#define UNDER_SANITIZERS true
#else
#define UNDER_SANITIZERS false
#endif

/*
 * The sanitizer build checks memory and undefined behaviour on every code path; the numbers are
 * the normal build's to check. A reference test that runs each of its cases on each of n chips
 * runs case i, under the sanitizers, on chip i mod n alone (every case and every chip still
 * run): ts_rotate(i, k, n) says whether case i runs on chip k.
 */
static inline bool ts_rotate(size_t i, size_t k, size_t n)
{
  return !UNDER_SANITIZERS || i % n == k;
}

struct run_result {
  int status;   /* exit status, or 128 + signal */
  char *out;    /* captured stdout (NUL-terminated, owned) */
  char *err;    /* captured stderr (NUL-terminated, owned) */
};

/* A fresh scratch directory under $TMPDIR (or /tmp); the path is owned by the caller. */
char *ts_tmpdir(void);

/* Write text to dir/name; returns the full path (owned by the caller). */
char *ts_write(const char *dir, const char *name, const char *text);

/* Read a whole file; NULL if it cannot be read (owned by the caller). */
char *ts_read(const char *path);

/*
 * Run argv (NULL-terminated; argv[0] is a path) with stdout and stderr captured.
 * extra_env ("K=V", may be NULL) is added to the environment.
 */
struct run_result ts_run(char *const argv[], const char *extra_env);

/* ts_run on the npusim binary under test with up to 15 arguments, NULL-terminated. */
struct run_result ts_npusim(const char *arg, ...);
/* The same with the arguments in an array (NULL-terminated, at most 31). */
struct run_result ts_npusim_argv(const char *const *args);

/*
 * `npusim run scenario --html page [--set set]` (set may be NULL), which must succeed; the page,
 * checked to be one self-contained document (a doctype, closed, no script, no link, no URL).
 * Owned by the caller.
 */
char *ts_html_page(const char *scenario, const char *page, const char *set);

void ts_run_free(struct run_result *r);

/* Occurrences of needle in s, in one pass (strstr in a loop is quadratic under ASan, whose
 * interceptor measures the whole haystack on every call). */
size_t ts_count(const char *s, const char *needle);

/* Remove a directory tree made by ts_tmpdir. */
void ts_rmtree(const char *dir);

#endif
