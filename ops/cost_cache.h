/*
 * cost_cache.h - (operator, arguments, fidelity, chip fingerprint) -> time and statistics.
 *
 * Costing thousands of kernels in a training replay, or the same kernels across the points of
 * a sweep, runs each distinct kernel once: an in-process memo, plus an optional cache file that
 * later runs reuse. The file is one header line and one line per entry, each line carrying a
 * checksum; a file whose header names another model revision (stale) or that fails any check
 * (corrupt, truncated, edited) is reported with a warning and ignored as a whole, never
 * trusted; saving writes a complete new file and renames it into place, merging what other
 * processes saved meanwhile under an advisory lock, so a crash never leaves a half-written
 * cache and concurrent sweeps do not lose each other's entries.
 *
 * The key holds the operator's canonical arguments, the fidelity, and arch_chip_fingerprint()
 * of the chip: any change to any chip parameter makes a different key. The file's header holds
 * OP_MODEL_REVISION, which carries OP_MODEL_FINGERPRINT, a hash of the sources of formats/,
 * memory/, cores/, ops/, engine/ and arch/ computed by the build (cmake/model_fingerprint.cmake):
 * a file written by any other version of the cost model is stale, with nothing to bump by hand.
 */
#ifndef NPUSIM_OPS_COST_CACHE_H
#define NPUSIM_OPS_COST_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ops/model_fingerprint.h" /* generated: OP_MODEL_FINGERPRINT */
#include "ops/op.h"

#define OP_MODEL_REVISION "npusim-model-" OP_MODEL_FINGERPRINT

/* What a cached cost keeps of an operator run. */
struct op_cost {
  double time_s;                 /* kernels' total, launch overheads included */
  double launch_s;
  double flops;                  /* model FLOPs */
  double cube_busy_s;            /* M pipe busy, summed over cores */
  double vec_busy_s;             /* V pipe busy, summed over cores */
  uint64_t gm_read_bytes, gm_write_bytes, hbm_bytes;
  double aic_mac_ratio, aiv_vec_ratio, aic_mte2_ratio, aiv_mte2_ratio;
  char bottleneck[24];
};

struct op_cache;

/*
 * Open a cache; path NULL keeps it in memory only. A stale or corrupt file is reported on warn
 * (if not NULL) as "warning: ..." and ignored. Never fails.
 */
struct op_cache *op_cache_open(const char *path, FILE *warn);

/* Write new entries to the file (merged with what is there now); 0 or NPU_EIO. */
int op_cache_save(struct op_cache *c);

void op_cache_close(struct op_cache *c);

/* Entries in memory, lookups answered from memory, and lookups that had to run the operator. */
void op_cache_stats(const struct op_cache *c, size_t *entries, uint64_t *hits, uint64_t *misses);

/*
 * The cost of operator d with arguments a on sys's chip at fidelity f: from the cache, or by
 * running it (timing only) and remembering the result. Event fidelity runs in a child process,
 * so that the caller's own SimGrid engine (a training replay) is never disturbed. Returns 0 or
 * an npu_err with diag filled (the operator's own error: bad shape for the chip).
 */
int op_cost_get(struct op_cache *c, const struct op_desc *d, const struct op_args *a,
                const struct arch_system *sys, enum core_fidelity f, struct op_cost *out,
                struct npu_diag *diag);

/* The cost summary of a finished run. */
void op_cost_from_result(const struct op_result *r, struct op_cost *out);

#endif
