/*
 * vecutil.h - small vector-core kernels that operators chain around their main kernel: fill a
 * GM buffer with a value (zeroing an atomic-add workspace) and cast a GM buffer between types
 * (fp32 partial sums to the output type). Tiles stream GM -> UB -> GM, double buffered, over
 * every vector core.
 */
#ifndef NPUSIM_OPS_VECUTIL_H
#define NPUSIM_OPS_VECUTIL_H

#include <stdint.h>

#include "ops/op.h"

/* Append to x a kernel that writes value to count elements of dtype at dst. */
void ops_fill(struct op_exec *x, uint64_t dst, enum npu_dtype dtype, uint64_t count, double value);

/* Append to x a kernel that casts count elements from (src, st) to (dst, dt). */
void ops_cast(struct op_exec *x, uint64_t src, enum npu_dtype st, uint64_t dst,
              enum npu_dtype dt, uint64_t count);

/* Unit begin and end of a double-buffered streaming kernel (tiles GM -> UB -> GM in buffers 0
 * and 1, MTE2 loading, V computing, MTE3 storing): both buffers start free for MTE2 and for V;
 * at the end every flag is waited for. ctx is not used. */
void ops_stream2_begin(struct core_tp *t, void *ctx);
void ops_stream2_end(struct core_tp *t, void *ctx);

/* Memory that lives as long as the execution (kernel contexts); zeroed. */
void *op_alloc(struct op_exec *x, size_t bytes);

#endif
