/*
 * test_gated_delta.c - the chunked gated delta rule: o and the final state against the
 * double-precision recurrence (tolerance in gated_delta.c's check: 4 unit roundoffs of the input
 * type x the tensor's largest element), on split cores (A2: two vector roles per AI core, GM
 * hand-over) and coupled cores (GPU SMs: one role), bf16 and fp16, shared q/k heads, batches and
 * sequences of several chunks, state tilings; batch and core invariance; the analytic fidelity
 * against the event one; refusals naming the parameter; the backward as the declared proxy it
 * is; the FLOP count.
 */
#include "tests/ops/opsupport.h"

#include <math.h>
#include <string.h>

#include "common/err.h"
#include "ops/parity.h"

static struct arch_system b2, h100, a100;

static void setup(void)
{
  ts_load_system(&b2, "ascend-910b2", NULL);
  ts_load_system(&h100, "nvidia-h100-sxm", NULL);
  ts_load_system(&a100, "nvidia-a100-80gb", NULL);
}

TestSuite(gated_delta, .init = setup, .timeout = 300);

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define OP "gated_delta"

Test(gated_delta, bf16_and_fp16_match_the_recurrence_on_split_cores)
{
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=256", "heads=2", "dk=64", "dv=64"));
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=256", "heads=2", "dk=64", "dv=64", "dtype=fp16"));
}

/* Four chunks of 64 per sequence, two sequences, each q/k head shared by two value heads, the
 * default head dimensions of 128: every state hand-over from chunk to chunk is exercised. */
Test(gated_delta, shared_qk_heads_batches_and_several_chunks)
{
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("batch=2", "seq=256", "heads=4", "k_heads=2"));
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=192", "heads=4", "k_heads=1", "dtype=fp16"));
}

Test(gated_delta, other_chunks_and_head_dims)
{
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=128", "heads=2", "chunk=32", "dk=128", "dv=64"));
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=64", "heads=3", "chunk=16", "dk=32", "dv=48"));
}

/* The state pass's split of dv into column blocks (fla's BV) and its chains per vector role (run
 * in step, their hand-overs interleaved) change no result. */
Test(gated_delta, state_split_and_chains_change_no_result)
{
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=128", "heads=2", "dv=128", "dk=64", "state_split=1"));
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=128", "heads=2", "dv=128", "dk=64", "state_split=4"));
  ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true,
        ARGS("seq=128", "heads=3", "dv=128", "dk=64", "state_split=4", "state_chains=4"));
  ts_op(&h100.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=128", "heads=3", "dv=64", "state_chains=2"));
}

Test(gated_delta, coupled_cores_h100_and_a100)
{
  ts_op(&h100.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("batch=2", "seq=256", "heads=4", "k_heads=2"));
  ts_op(&a100.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=192", "heads=2", "dtype=fp16"));
}

/* One event run per test (the engine starts once per process). */
Test(gated_delta, event_fidelity_runs_the_same_program_functionally)
{
  ts_op(&b2.chip, OP, CORE_FIDELITY_EVENT, true, ARGS("batch=2", "seq=128", "heads=4", "k_heads=2"));
}

/* The kernel bodies (launch overhead aside) within 5% of each other, the GEMM fidelity grid's
 * tolerance, at a shape of one block per core; the event run functional too. With several blocks per core, or all cores in
 * latency-bound state chains, the analytic fidelity comes out slower: at the Qwen3-Next TP-2 shape
 * (seq 4096, heads 16, k_heads 8) 4% on the 910B2 (the WY launch, whose consecutive blocks overlap
 * more in the event run), 34% on the H100 (the state pass's 128 chains, each taking a static
 * share of GM bandwidth analytically). */
static void fidelities_agree(const struct arch_chip *chip, const char *const *args)
{
  struct op_result e = ts_op(chip, OP, CORE_FIDELITY_EVENT, true, args);
  struct op_result a = ts_op(chip, OP, CORE_FIDELITY_ANALYTIC, false, args);
  double eb = e.total.time_s - e.total.launch_s, ab = a.total.time_s - a.total.launch_s;
  cr_assert(fabs(ab - eb) <= 0.05 * eb, "%s: analytic %.4g us, event %.4g us", chip->name, ab * 1e6, eb * 1e6);
}

Test(gated_delta, analytic_within_5_percent_of_event_on_split_cores)
{
  fidelities_agree(&b2.chip, ARGS("seq=1024", "heads=2"));
}

Test(gated_delta, analytic_within_5_percent_of_event_on_coupled_cores)
{
  fidelities_agree(&h100.chip, ARGS("seq=1024", "heads=2"));
}

/* A sequence's outputs do not depend on the batch it runs in, nor on the cores (npusim kernel
 * --parity): each sequence's chains run alone, and the inputs are per-tensor streams. */
Test(gated_delta, batch_and_cores_change_no_bits)
{
  const struct op_desc *d = op_find(OP);
  const char *const *kv = ARGS("batch=2", "seq=128", "heads=2", "k_heads=1");
  struct op_args a;
  struct npu_diag diag;
  cr_assert_eq(op_args_parse(d, &a, kv, 4, &diag), 0);
  struct op_parity par;
  cr_assert_eq(op_parity_run(d, &a, &b2.chip, 1, &par, &diag), 0, "%s", diag.msg);
  int compared = 0;
  for (int i = 0; i < par.n; i++) {
    cr_assert(par.cases[i].comparable, "%s: %s", par.cases[i].what, par.cases[i].why);
    compared++;
  }
  cr_assert(compared >= 2);
  cr_assert_eq(par.differ, 0, "%d cases differ", par.differ);
  op_parity_release(&par);
}

static void refused(const char *const *kv, int rc, const char *opt)
{
  char msg[2048];
  cr_assert_eq(ts_op_err(&b2.chip, OP, kv, msg), rc, "%s", msg);
  cr_assert(strstr(msg, opt) != NULL, "expected %s named in: %s", opt, msg);
}

Test(gated_delta, refusals_name_the_parameter)
{
  refused(ARGS("seq=100", "heads=2"), NPU_EINVAL, "--seq");
  refused(ARGS("seq=128", "heads=6", "k_heads=4"), NPU_EINVAL, "--k_heads");
  refused(ARGS("seq=128", "heads=2", "dtype=fp32"), NPU_EINVAL, "--dtype");
  refused(ARGS("seq=96", "heads=2", "chunk=48", "dk=24"), NPU_EINVAL, "--dk");
  refused(ARGS("seq=128", "heads=2", "state_split=3"), NPU_EINVAL, "--state_split");
  refused(ARGS("seq=128", "heads=2", "state_chains=5"), NPU_EINVAL, "--state_chains");
  refused(ARGS("seq=256", "heads=2", "chunk=128", "dk=256", "dv=256"), NPU_ENOFIT, "--dk");
}

/* The backward is a declared proxy, with its reason; pass=bwd runs eight launches whose matmul
 * FLOPs are 2.4x the forward's, and still produces (and checks) the forward's outputs. */
Test(gated_delta, backward_is_a_declared_proxy_of_forward_launches)
{
  const struct op_desc *d = op_find(OP);
  cr_assert_eq(d->bwd.kind, OP_BWD_PROXY);
  cr_assert(d->bwd.reason && strstr(d->bwd.reason, "chunk_gated_delta_rule_bwd"));
  struct op_result f = ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=256", "heads=2"));
  struct op_result b = ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, true, ARGS("seq=256", "heads=2", "pass=bwd"));
  cr_assert_eq(f.nkernels, 4);
  cr_assert_eq(b.nkernels, 8);
  cr_assert(b.flops > 2.2 * f.flops && b.flops < 2.6 * f.flops, "bwd %.4g vs fwd %.4g FLOPs", b.flops, f.flops);
  cr_assert(b.total.time_s > 1.5 * f.total.time_s);
}

/* The FLOP count is the chunked algorithm's matmuls: at one chunk (no w h, no q h) 2 C^2 (3 dk +
 * 2 dv) + 2 dk C dv per value head. */
Test(gated_delta, flops_count_the_chunked_matmuls)
{
  struct op_result r = ts_op(&b2.chip, OP, CORE_FIDELITY_ANALYTIC, false, ARGS("seq=64", "heads=2"));
  double C = 64, K = 128, V = 128;
  cr_assert_float_eq(r.flops, 2 * (2 * C * C * (3 * K + 2 * V) + 2 * K * C * V), 1);
}
