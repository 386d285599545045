/*
 * gm.h - global memory: the tensors a kernel reads and writes, each at an address of one flat
 * device address space. In functional mode a tensor has host storage that instructions really
 * read and write; in timing-only mode it has none and only its bounds are checked.
 */
#ifndef NPUSIM_MEMORY_GM_H
#define NPUSIM_MEMORY_GM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mem_gm;

struct mem_gm *mem_gm_create(void);
void mem_gm_destroy(struct mem_gm *gm);

/*
 * Register a tensor of bytes bytes named name (copied); host is its storage (borrowed, may be
 * NULL in timing-only mode). Returns its device address, aligned to 512 bytes; tensors never
 * overlap.
 */
uint64_t mem_gm_add(struct mem_gm *gm, const char *name, uint64_t bytes, void *host);

/*
 * Find the tensor holding [addr, addr + bytes). On success returns true and, when host_out is
 * not NULL, the host address of addr (NULL in timing-only mode). False if the range is not
 * inside one tensor.
 */
bool mem_gm_resolve(const struct mem_gm *gm, uint64_t addr, uint64_t bytes, void **host_out);

/*
 * The device whose memory holds a tensor, for launches over several devices (cores/kernel.h,
 * core_launch_opts.ranks): one address space spans the devices' memories, as a unified virtual
 * address space or HCCL's mapped peer windows do, and a tensor lives on one of them (0 unless
 * set). set_device takes any address inside the tensor; mem_gm_device gives -1 for an address
 * outside every tensor.
 */
void mem_gm_set_device(struct mem_gm *gm, uint64_t addr, int device);
int mem_gm_device(const struct mem_gm *gm, uint64_t addr);
/* Number of tensors, and the index of the tensor holding addr (-1 if none). */
size_t mem_gm_count(const struct mem_gm *gm);
long mem_gm_index(const struct mem_gm *gm, uint64_t addr);
/* Bytes of tensor i. */
uint64_t mem_gm_bytes(const struct mem_gm *gm, size_t i);

/* Bytes of all tensors. */
uint64_t mem_gm_total_bytes(const struct mem_gm *gm);

/* The device address range the tensors lie in: [*base, *base + *span). */
void mem_gm_range(const struct mem_gm *gm, uint64_t *base, uint64_t *span);

#endif
