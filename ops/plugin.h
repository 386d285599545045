/*
 * plugin.h - operators from shared objects built outside npusim (the public kernel API's entry).
 *
 * An out-of-tree kernel is a shared object that includes <npusim/kernel_api.h>, defines one or
 * more struct op_desc exactly as the built-in operators of ops/ do, and lists them with
 * NPUSIM_KERNEL_PLUGIN. `npusim kernel --load FILE`, the kernel scenario key kernel.load and the
 * training key model.kernels.load load it; its operators then run, functionally and timed,
 * exactly as built-in ones (the same op_run, the same chip model), and a training scenario can
 * cost a built-in operator's calls with one of them (model.kernels.<op>).
 *
 * Symbols: the shared object is linked against nothing; the npusim executable exports the API's
 * functions (core_*, op_*, fmt_*, npu_diag_set) and they bind when the object is loaded, as a
 * Lua C module binds to the lua executable. The object must therefore be built against the
 * headers of the npusim that loads it, which the loader checks twice:
 *   api_version   NPUSIM_KERNEL_API_VERSION, bumped when a function or a meaning changes;
 *   abi           OP_PLUGIN_ABI, a hash of the sizes and key offsets of every struct the API
 *                 passes by pointer or value, so that a layout change is caught even where
 *                 the version was not bumped.
 * A mismatch is refused with both values named, never run.
 */
#ifndef NPUSIM_OPS_PLUGIN_H
#define NPUSIM_OPS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "arch/arch.h"
#include "common/diag.h"
#include "cores/kernel.h"
#include "ops/op.h"

/* The kernel API's version: 1 is npusim 0.1's (2026-12). */
#define NPUSIM_KERNEL_API_VERSION 1

#define OP__ABI_MIX(h, v) (((h) ^ (uint64_t)(v)) * 1099511628211ull)
/* A hash of the layouts a kernel and npusim exchange (a constant expression). */
#define OP_PLUGIN_ABI                                                                                   \
  OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(      \
  OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(OP__ABI_MIX(      \
      14695981039346656037ull, sizeof(struct op_desc)), sizeof(struct op_param)),                      \
      sizeof(struct op_args)), sizeof(struct op_tensor)), sizeof(struct op_call)),                     \
      sizeof(struct core_kernel)), sizeof(struct core_tile)), sizeof(struct core_vec)),                \
      sizeof(struct core_copy)), sizeof(struct core_mmad)), sizeof(struct arch_chip)),                 \
      offsetof(struct arch_chip, buf)), offsetof(struct op_desc, bwd)),                                \
      CORE_PIPE_COUNT * 64 + CORE_VEC_COUNT), NPU_DT_COUNT * 64 + ARCH_BUF_COUNT),                     \
      OP_MAX_PARAMS * 64 + OP_MAX_KERNELS)

/* What a shared object's npusim_kernel_plugin() returns. */
struct op_plugin {
  uint32_t api_version;               /* NPUSIM_KERNEL_API_VERSION it was built with */
  uint64_t abi;                       /* OP_PLUGIN_ABI it was built with */
  const char *name;                   /* the plugin's name, for messages and `kernel list` */
  const struct op_desc *const *ops;   /* its operators */
  int nops;
};

#define OP_PLUGIN_SYMBOL "npusim_kernel_plugin"

/*
 * In the kernel's source, once: NPUSIM_KERNEL_PLUGIN("my_kernels", &op_a, &op_b) defines the
 * entry npusim looks for, with the version and layout hash of the headers it was built with.
 */
#define NPUSIM_KERNEL_PLUGIN(plugin_name, ...)                                                    \
  static const struct op_desc *const op__plugin_ops[] = {__VA_ARGS__};                            \
  const struct op_plugin *npusim_kernel_plugin(void);                                             \
  const struct op_plugin *npusim_kernel_plugin(void)                                              \
  {                                                                                               \
    static const struct op_plugin p = {NPUSIM_KERNEL_API_VERSION, OP_PLUGIN_ABI, (plugin_name),   \
                                       op__plugin_ops,                                            \
                                       (int)(sizeof op__plugin_ops / sizeof op__plugin_ops[0])};  \
    return &p;                                                                                    \
  }

/* ------------------------------------------------------------------ host side (npusim) */

/*
 * Load the shared object at path and register its operators. Loading the same file again does
 * nothing; an operator whose name is taken (built in, or by another object) is refused, as is
 * an object built against another API version or layout, or whose operators are incomplete
 * (a missing function, a parameter table the command line could not parse). 0, or NPU_ECONFIG
 * with diag naming the file (and key, when the caller passes the key that named it).
 */
int op_plugin_load(const char *path, const char *key, struct npu_diag *diag);

/* The file an operator was loaded from, or NULL for a built-in one. */
const char *op_origin(const struct op_desc *d);
/* A hash of that file's bytes (0 for built-ins): cost-cache keys carry it, so that a rebuilt
 * kernel is never answered with its previous build's costs. */
uint64_t op_origin_hash(const struct op_desc *d);

#endif
