/* helpers.c - shared setup for the interconnect tests; see helpers.h. */
#include "tests/interconnect/helpers.h"

#include <criterion/criterion.h>
#include <math.h>

#include "tests/support/chip.h"

void th_init(struct th *h, const char *preset, const char *const *sets, int nranks)
{
  ts_load_system(&h->sys, preset, sets);
  ic_params_default(&h->prm, &h->sys);
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_create(&h->sim, &h->sys, nranks, &h->prm, &d), 0, "%s", d.msg);
}

void th_fini(struct th *h)
{
  ic_sim_destroy(h->sim);
  h->sim = NULL;
}

void th_comm(struct th *h, struct ic_comm *c, int first, int n, int stride)
{
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_comm_init_range(c, first, n, stride, ic_sim_topo(h->sim), "comm", &d), 0, "%s",
               d.msg);
}

struct ic_coll th_coll(enum ic_op op, enum ic_algo algo, enum ic_fidelity f, double bytes)
{
  return (struct ic_coll){.op = op, .algo = algo, .fidelity = f, .bytes = bytes};
}

double th_run(struct th *h, const struct ic_comm *c, struct ic_coll coll, struct ic_result *res)
{
  struct ic_run r = {.comm = c, .coll = coll};
  struct npu_diag d;
  npu_diag_clear(&d);
  cr_assert_eq(ic_sim_run(h->sim, &r, 1, &d), 0, "%s: %s", d.key, d.msg);
  if (res) *res = r.result;
  return r.result.time_s;
}

void th_close(double got, double want, double rel, const char *what)
{
  cr_assert(fabs(got - want) <= rel * fabs(want), "%s: got %.9g, want %.9g (%+.4f%%)", what, got,
            want, 100 * (got - want) / want);
}
