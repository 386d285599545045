/*
 * msprof.h - a kernel run written as the msprof op simulator lays out its output
 * (`npusim kernel OP ... --msprof DIR`), so tools and habits built on msprof read npusim's
 * instruction-level timeline.
 *
 * The layout follows msprof's public documentation (msopprof "simulator mode performance
 * data"; msprof op's PipeUtilization and OpBasicInfo pages, CANN 8.x):
 *
 *   DIR/simulator/core<N>.cubecore0/core<N>.cubecore0_instr_exe.csv   one folder per core
 *   DIR/simulator/core<N>.veccore<M>/core<N>.veccore<M>_instr_exe.csv  that ran instructions
 *   DIR/simulator/core<...>/trace.json          that core's instruction pipeline
 *   DIR/simulator/trace.json                    every core's, one process per core
 *   DIR/PipeUtilization.csv                     per core: time, cycles, per-pipe time and ratio
 *   DIR/OpBasicInfo.csv                         per kernel launch: task duration (device side,
 *                                               without the launch overhead), block dims, clock
 *
 * Core names: cube core k is core<k>.cubecore0; vector core j (0-based among the vector cores)
 * is core<j / r>.veccore<j % r>, r the vector cores per cube core (2 on 910B), so the two
 * vector cores paired with cube core k share its number, as msprof names them. A coupled chip's
 * cores are core<k>.cubecore0.
 *
 * instr_exe.csv: msprof's columns instr, addr, pipe, call_count, cycles, running_time(us),
 * detail, then two of npusim's, bytes and repeat (totals over the calls). A row is one distinct
 * instruction form (mnemonic, pipe and detail: shape, type, path); tile programs are generated,
 * not compiled, so they have no PC: addr is the form's ordinal on that core, in order of first
 * execution. The mnemonics are npusim's (MOV_GM_TO_UB, MMAD, VADD, SET_FLAG, ...), in the style
 * of Ascend C's instruction names. code_exe.csv (time per source line) is not written: there
 * are no source lines.
 *
 * trace.json: Chrome trace events ("X"), threads named after msprof's pipes (SCALAR, MTE1,
 * MTE2, MTE3, CUBE, VECTOR, FIXP), args bytes, repeat and detail; set/wait flags, within a core
 * and across cores, as flow arrows ("s" at the set, "f" at the wait it releases). Streamed,
 * never cut. Times in us from the start of the first kernel body.
 *
 * The tree is built in DIR.partial<pid> and renamed to DIR when the run succeeds; DIR must not
 * exist yet or be empty.
 */
#ifndef NPUSIM_MICRO_MSPROF_H
#define NPUSIM_MICRO_MSPROF_H

#include "arch/arch.h"
#include "common/diag.h"
#include "cores/kernel.h"
#include "ops/op.h"

struct mc_msprof;

/* Check DIR (absent or empty) and start the partial tree. NPU_EIO / NPU_EINVAL with diag. */
int mc_msprof_open(struct mc_msprof **out, const char *dir, const struct arch_chip *chip, struct npu_diag *diag);
/* The observer to run the kernel with (op_run_opts.observe). */
const struct core_observer *mc_msprof_observer(struct mc_msprof *m);
/* Write the tables and move the tree into place; frees m. op names the operator (Op Type). */
int mc_msprof_close(struct mc_msprof *m, const char *op, struct npu_diag *diag);
/* Remove the partial tree; frees m. NULL is allowed. */
void mc_msprof_abort(struct mc_msprof *m);

#endif
