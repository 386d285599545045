/*
 * parity.c - the report of `npusim kernel OP --parity` (ops/parity.h): one line per case, what
 * changed and whether the outputs did, as text and as JSON.
 */
#include "micro/micro.h"

#include <math.h>
#include <stdio.h>

#include "common/json.h"

void mc_parity_text(const struct op_desc *d, const struct op_parity *p, const struct arch_system *sys, uint64_t seed,
                    struct npu_buf *o)
{
  npu_buf_printf(o, "parity of %s %s on %s (functional, seed %llu)\n", d->name, p->base, sys->chip.name,
                 (unsigned long long)seed);
  npu_buf_printf(o, "  compared          %s: the tensors the base run writes, bit for bit\n",
                 p->tensors[0] ? p->tensors : "none");
  if (p->batch_param[0])
    npu_buf_printf(o, "  batch             %s (a batch case compares the rows the two runs share)\n", p->batch_param);
  npu_buf_printf(o, "  %-7s %-34s %12s %12s %10s %10s  %s\n", "kind", "case", "compared", "differing", "max ulp",
                 "max rel", "first difference / why not compared");
  int compared = 0;
  for (int i = 0; i < p->n; i++) {
    const struct op_parity_case *c = &p->cases[i];
    npu_buf_printf(o, "  %-7s %-34s ", op_parity_kind_name(c->kind), c->what);
    if (!c->comparable) {
      npu_buf_printf(o, "%12s %12s %10s %10s  %s: %s\n", "-", "-", "-", "-", c->ran ? "not comparable" : "not run",
                     c->why);
      continue;
    }
    compared++;
    npu_buf_printf(o, "%12llu %12llu %10.3g %10.3g  %s\n", (unsigned long long)c->compared,
                   (unsigned long long)c->differing, c->max_ulp, c->max_rel, c->differing ? c->first : "identical");
  }
  if (!compared)
    npu_buf_printf(o, "  result            no case could be compared\n");
  else if (p->differ)
    npu_buf_printf(o, "  result            %d of %d compared cases change the output bits\n", p->differ, compared);
  else
    npu_buf_printf(o, "  result            invariant: all %d compared cases give identical bits\n", compared);
}

static void num(struct npu_json *j, const char *k, double v)
{
  npu_json_key(j, k);
  if (isfinite(v)) npu_json_number(j, v);
  else npu_json_null(j);
}

void mc_parity_json(const struct op_desc *d, const struct op_parity *p, const struct arch_system *sys, uint64_t seed,
                    struct npu_buf *o)
{
  struct npu_json j;
  npu_json_init(&j, o);
  npu_json_object_begin(&j);
  npu_json_key(&j, "op");
  npu_json_string(&j, d->name);
  npu_json_key(&j, "args");
  npu_json_string(&j, p->base);
  npu_json_key(&j, "arch");
  npu_json_string(&j, sys->chip.name);
  num(&j, "seed", (double)seed);
  npu_json_key(&j, "batch_param");
  npu_json_string(&j, p->batch_param);
  npu_json_key(&j, "tensors");
  npu_json_string(&j, p->tensors);
  num(&j, "cases_differing", p->differ);
  npu_json_key(&j, "cases");
  npu_json_array_begin(&j);
  for (int i = 0; i < p->n; i++) {
    const struct op_parity_case *c = &p->cases[i];
    npu_json_object_begin(&j);
    npu_json_key(&j, "kind");
    npu_json_string(&j, op_parity_kind_name(c->kind));
    npu_json_key(&j, "case");
    npu_json_string(&j, c->what);
    npu_json_key(&j, "ran");
    npu_json_bool(&j, c->ran);
    npu_json_key(&j, "comparable");
    npu_json_bool(&j, c->comparable);
    npu_json_key(&j, "why");
    npu_json_string(&j, c->why);
    num(&j, "compared", (double)c->compared);
    num(&j, "differing", (double)c->differing);
    num(&j, "max_ulp", c->max_ulp);
    num(&j, "max_rel", c->max_rel);
    npu_json_key(&j, "first");
    npu_json_string(&j, c->first);
    npu_json_object_end(&j);
  }
  npu_json_array_end(&j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
}
