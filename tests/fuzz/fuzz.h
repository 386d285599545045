/*
 * fuzz.h - the fuzz targets: each takes bytes and feeds them to one of npusim's input readers,
 * which must refuse or accept them without a crash, a leak, undefined behaviour or a hang.
 *
 * Built two ways (tests/fuzz/CMakeLists.txt): as libFuzzer binaries (clang, ASan + UBSan,
 * `make fuzz`), one per target through fuzz_main.c; and into the suite's test_fuzz, which replays
 * every seed of tests/fuzz/corpus/ and the project's own scenario and preset files through
 * every target (a regression test of each finding: its input goes into the corpus).
 */
#ifndef NPUSIM_TESTS_FUZZ_FUZZ_H
#define NPUSIM_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int fuzz_units(const uint8_t *data, size_t size);    /* unit strings of every kind (common/units.h) */
int fuzz_set(const uint8_t *data, size_t size);      /* --set KEY=VALUE on a training scenario */
int fuzz_scenario(const uint8_t *data, size_t size); /* a scenario file of any kind, loaded and checked */
int fuzz_csv(const uint8_t *data, size_t size);      /* a results CSV (merge, report, plot, compare) */
int fuzz_nccl(const uint8_t *data, size_t size);     /* a collective's table, nccl-tests' layout (compare) */
int fuzz_kineto(const uint8_t *data, size_t size);   /* a PyTorch profiler trace, Kineto's JSON (compare) */

/* Scenarios the loader accepted so far (fuzz_set, fuzz_scenario), for the replay test. */
extern int fuzz_loaded;

/* The bytes as a NUL-terminated string (owned by the caller), NULs inside kept. */
char *fuzz_string(const uint8_t *data, size_t size);
/* A file in this process's scratch directory holding the bytes: its path (static storage). */
const char *fuzz_file(const char *name, const uint8_t *data, size_t size);

#endif
