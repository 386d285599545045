/* benchutil.h - wall clock and peak memory for benchmarks. */
#ifndef NPUSIM_BENCH_BENCHUTIL_H
#define NPUSIM_BENCH_BENCHUTIL_H

/* Monotonic wall time in seconds. */
double bench_now(void);
/* Peak resident set size of this process in bytes (getrusage). */
double bench_peak_rss_bytes(void);

#endif
