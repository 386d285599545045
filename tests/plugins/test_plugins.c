/*
 * test_plugins.c - out-of-tree kernels (ops/plugin.h, include/npusim/kernel_api.h): the
 * examples build against the installed API with their own Makefiles and pass their functional
 * checks; a loaded kernel costs a training step's substituted calls, by the same numbers
 * `npusim kernel` gives it; objects built against another API version or layout, without the
 * entry, with a taken name or an incomplete operator are refused with exit 2 and the reason;
 * a rebuilt plugin is never answered with its previous build's cached costs; `kernel OP --help`
 * lists an operator's parameters.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/support.h"

#define TINY NPUSIM_SOURCE_DIR "/tests/workloads/data/tiny.cfg"

TestSuite(plugins, .timeout = 300);

/* Run a shell command line; its exit status must be 0. */
static void sh(const char *cmd)
{
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  struct run_result r = ts_run(argv, NULL);
  cr_assert_eq(r.status, 0, "%s: exit %d\n%s%s", cmd, r.status, r.out, r.err);
  ts_run_free(&r);
}

/* Install npusim (executable, API headers, pkg-config file) under dir/prefix, as `make install`. */
static void install(const char *dir)
{
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' --install '%s' --prefix '%s/prefix' >/dev/null", NPUSIM_CMAKE, NPUSIM_BUILD_DIR, dir);
  sh(cmd);
}

/* Build example `name` with its Makefile against the install under dir; the object's path. */
static char *build_example(const char *dir, const char *name)
{
  char cmd[4096], *so = malloc(1024);
  snprintf(cmd, sizeof cmd, "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' make -s -f '%s/examples/%s/Makefile' OUT='%s'",
           dir, NPUSIM_SOURCE_DIR, name, dir);
  sh(cmd);
  snprintf(so, 1024, "%s/%s.so", dir, name);
  return so;
}

/*
 * A small plugin written here, compiled against the source tree's headers with `defines`: an
 * operator "probe" (rows, hidden) of one vector block per row that spends CYCLES scalar cycles,
 * with switches that break it in the ways the loader must catch.
 */
static const char probe_src[] =
    "#include <npusim/kernel_api.h>\n"
    "#include <string.h>\n"
    "#ifndef CYCLES\n#define CYCLES 1000\n#endif\n"
    "#ifndef NAME\n#define NAME \"probe\"\n#endif\n"
    "static const struct op_param params[] = {{\"rows\", OP_P_DIM, NULL, \"rows\", NULL},\n"
    "  {\"hidden\", OP_P_DIM, NULL, \"row length\", NULL}};\n"
    "struct plan { uint64_t rows; };\n"
    "static void block(struct core_tp *t, void *ctx, uint64_t b) { (void)ctx; (void)b; core_scalar(t, CYCLES); }\n"
    "static int plan(void *pp, const struct op_desc *d, const struct op_args *a, const struct arch_chip *c,\n"
    "                struct npu_diag *diag) { (void)c; (void)diag; ((struct plan *)pp)->rows = op_u(d, a, \"rows\"); return 0; }\n"
    "static void setup(void *pp, struct op_exec *x) { struct plan *p = pp;\n"
    "  struct core_kernel k = {.name = NAME, .mode = CORE_MODE_VECTOR, .block_dim = 1, .nblocks = p->rows,\n"
    "                          .ctx = p, .block = block}; op_kernel(x, &k); }\n"
    "static double flops(const void *p) { (void)p; return 0; }\n"
    "__attribute__((unused)) static bool check(void *p, struct op_exec *x, double *e, char *s, size_t n) { (void)p; (void)x; *e = 0;\n"
    "  snprintf(s, n, \"nothing to check\"); return true; }\n"
    "__attribute__((unused)) static const struct op_desc probe = {.name = NAME, .summary = \"a probe\", .params = params, .nparams = 2,\n"
    "  .plan_size = sizeof(struct plan), .plan = plan, .setup = setup, .flops = flops,\n"
    "#ifndef NO_CHECK\n  .check = check,\n#endif\n"
    "  .bwd = {OP_BWD_NONE, \"none\", NULL, NULL}};\n"
    "#if defined(API_VERSION) || defined(ABI_XOR)\n"
    "#ifndef API_VERSION\n#define API_VERSION NPUSIM_KERNEL_API_VERSION\n#endif\n"
    "#ifndef ABI_XOR\n#define ABI_XOR 0\n#endif\n"
    "static const struct op_desc *const ops[] = {&probe};\n"
    "const struct op_plugin *npusim_kernel_plugin(void);\n"
    "const struct op_plugin *npusim_kernel_plugin(void) {\n"
    "  static const struct op_plugin p = {API_VERSION, OP_PLUGIN_ABI ^ ABI_XOR, \"probe\", ops, 1}; return &p; }\n"
    "#elif !defined(NO_ENTRY)\n"
    "NPUSIM_KERNEL_PLUGIN(\"probe\", &probe)\n"
    "#endif\n";

static char *build_probe(const char *dir, const char *file, const char *defines)
{
  char *src = ts_write(dir, "probe.c", probe_src), cmd[4096], *so = malloc(1024);
  snprintf(so, 1024, "%s/%s", dir, file);
  snprintf(cmd, sizeof cmd, "'%s' -std=c11 -D_POSIX_C_SOURCE=200809L -shared -fPIC -Wall -Wextra -Werror %s -I'%s' "
           "-I'%s/include' '%s' -o '%s'", NPUSIM_CC, defines, NPUSIM_SOURCE_DIR, NPUSIM_SOURCE_DIR, src, so);
  sh(cmd);
  free(src);
  return so;
}

/* The number after "key": in a JSON text (first occurrence after `from`), or -1. */
static double json_num(const char *text, const char *from, const char *key)
{
  const char *p = from ? strstr(text, from) : text;
  if (!p) return -1;
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\": ", key);
  p = strstr(p, pat);
  return p ? atof(p + strlen(pat)) : -1;
}

Test(plugins, the_examples_build_against_the_installed_api_and_pass_their_checks)
{
  char *dir = ts_tmpdir();
  install(dir);
  char *a = build_example(dir, "rms_norm_quant"), *b = build_example(dir, "dequant_swiglu_quant");
  char npusim[1024];
  snprintf(npusim, sizeof npusim, "%s/prefix/bin/npusim", dir);
  char *argv1[] = {npusim, "kernel", "--load", a, "rms_norm_quant", "--rows", "96", "--hidden", "2048",
                   "--functional", NULL};
  struct run_result r = ts_run(argv1, NULL);
  cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_assert(strstr(r.out, "functional check  passed"), "%s", r.out);
  ts_run_free(&r);
  char *argv2[] = {npusim, "kernel", "--load", b, "dequant_swiglu_quant", "--rows", "96", "--ffn", "1024",
                   "--functional", "--fidelity", "analytic", NULL};
  r = ts_run(argv2, NULL);
  cr_assert_eq(r.status, 0, "%s%s", r.out, r.err);
  cr_assert(strstr(r.out, "functional check  passed"), "%s", r.out);
  ts_run_free(&r);
  free(a);
  free(b);
  ts_rmtree(dir);
  free(dir);
}

/* A kernel call's time in a step's summary.json (the first call of op with args), less that
 * kernel's device time alone (`npusim kernel ... --json`: time_s - launch_s): what the step adds
 * around a kernel (the stream gap between queued kernels), the same for every kernel. */
static double step_overhead(const char *json, const char *op, const char *args, const char *const *kernel_argv)
{
  char pat[256];
  snprintf(pat, sizeof pat, "\"op\": \"%s\",\n      \"args\": \"%s\"", op, args);
  const char *at = strstr(json, pat);
  cr_assert(at, "no %s call with %s in\n%s", op, args, json);
  double in_step = json_num(at, NULL, "time_s");
  char *argv[24];
  int n = 0;
  argv[n++] = (char *)NPUSIM_BINARY;
  for (const char *const *a = kernel_argv; *a; a++) argv[n++] = (char *)*a;
  argv[n] = NULL;
  struct run_result r = ts_run(argv, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  double alone = json_num(r.out, NULL, "time_s") - json_num(r.out, NULL, "launch_s");
  ts_run_free(&r);
  cr_assert(in_step > 0 && alone > 0);
  return in_step - alone;
}

Test(plugins, a_substituted_operator_is_costed_by_the_loaded_kernel_as_a_built_in_one)
{
  char *dir = ts_tmpdir();
  install(dir);
  char *so = build_example(dir, "rms_norm_quant"), load[1200], json[1100];
  snprintf(load, sizeof load, "model.kernels.load=%s", so);
  snprintf(json, sizeof json, "%s/summary.json", dir);
  /* the built-in norm */
  struct run_result r = ts_npusim("run", TINY, "-o", dir, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  char *text = ts_read(json);
  const char *builtin[] = {"kernel", "rms_norm", "--rows", "1024", "--hidden", "1024", "--residual", "false",
                           "--fidelity", "analytic", "--arch", "ascend-910b2", "--json", NULL};
  double base = step_overhead(text, "rms_norm", "rows=1024 hidden=1024 dtype=bf16 residual=false", builtin);
  free(text);
  /* substituted: no rms_norm call is left, and the loaded kernel is costed as the built-in one is */
  r = ts_npusim("run", TINY, "--set", load, "--set", "model.kernels.rms_norm=rms_norm_quant", "-o", dir, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "substituted    every rms_norm call costed by rms_norm_quant, loaded from "), "%s", r.out);
  ts_run_free(&r);
  text = ts_read(json);
  cr_assert(!strstr(text, "\"op\": \"rms_norm\""), "a built-in rms_norm call is left");
  const char *loaded[] = {"kernel", "--load", so, "rms_norm_quant", "--rows", "1024", "--hidden", "1024",
                          "--fidelity", "analytic", "--arch", "ascend-910b2", "--json", NULL};
  double sub = step_overhead(text, "rms_norm_quant", "rows=1024 hidden=1024 dtype=bf16", loaded);
  cr_assert(base > 0, "a kernel in the step costs %.9g s more than alone, less its launch", base);
  cr_assert_float_eq(sub, base, 1e-12, "the loaded kernel's step overhead %.9g s, the built-in's %.9g s", sub, base);
  free(text);
  free(so);
  ts_rmtree(dir);
  free(dir);
}

Test(plugins, a_substitute_lacking_a_parameter_the_calls_give_is_refused_at_its_key)
{
  char *dir = ts_tmpdir();
  install(dir);
  char *so = build_example(dir, "dequant_swiglu_quant"), load[1200];
  snprintf(load, sizeof load, "model.kernels.load=%s", so);
  struct run_result r = ts_npusim("run", TINY, "--set", load, "--set", "model.kernels.rms_norm=dequant_swiglu_quant",
                                  NULL);
  cr_assert_eq(r.status, 2, "%s%s", r.out, r.err);
  cr_assert(strstr(r.err, "model.kernels.rms_norm: 'dequant_swiglu_quant' needs parameter 'ffn'"), "%s", r.err);
  ts_run_free(&r);
  r = ts_npusim("run", TINY, "--set", "model.kernels.rms_norm=rms_norm_quant", NULL);
  cr_assert_eq(r.status, 2);
  cr_assert(strstr(r.err, "model.kernels.rms_norm: unknown operator 'rms_norm_quant'"), "%s", r.err);
  ts_run_free(&r);
  free(so);
  ts_rmtree(dir);
  free(dir);
}

/* Load `so` with `npusim kernel list`: exit 2 and `why` in the message. */
static void refused(const char *so, const char *why)
{
  struct run_result r = ts_npusim("kernel", "list", "--load", so, NULL);
  cr_assert_eq(r.status, 2, "exit %d for %s\n%s", r.status, so, r.err);
  cr_assert(strstr(r.err, why), "expected '%s' in: %s", why, r.err);
  cr_assert(strstr(r.err, "--load"), "%s", r.err);
  ts_run_free(&r);
}

Test(plugins, objects_built_wrongly_are_refused_with_the_reason)
{
  char *dir = ts_tmpdir();
  char *v = build_probe(dir, "version.so", "-DAPI_VERSION=999");
  refused(v, "built against kernel API version 999, this npusim has version 1");
  char *l = build_probe(dir, "layout.so", "-DABI_XOR=1");
  refused(l, "built against headers of another layout");
  char *e = build_probe(dir, "noentry.so", "-DNO_ENTRY");
  refused(e, "not a kernel plugin: no npusim_kernel_plugin()");
  char *t = build_probe(dir, "taken.so", "-DNAME='\"gemm\"'");
  refused(t, "operator 'gemm' is already built in");
  char *c = build_probe(dir, "nocheck.so", "-DNO_CHECK");
  refused(c, "operator 'probe' lacks plan, setup, flops, check or plan_size");
  refused("/nonexistent/x.so", "cannot open kernel plugin");
  char *files[] = {v, l, e, t, c};
  for (int i = 0; i < 5; i++) free(files[i]);
  ts_rmtree(dir);
  free(dir);
}

Test(plugins, a_rebuilt_plugin_is_never_answered_with_its_previous_costs)
{
  char *dir = ts_tmpdir();
  char cache[1100], set_cache[1200], load[1200];
  snprintf(cache, sizeof cache, "%s/costs.txt", dir);
  snprintf(set_cache, sizeof set_cache, "run.cost_cache=%s", cache);
  double step[2];
  for (int i = 0; i < 2; i++) {
    char *so = build_probe(dir, "probe.so", i ? "-DCYCLES=200000" : "-DCYCLES=1000");
    snprintf(load, sizeof load, "model.kernels.load=%s", so);
    struct run_result r = ts_npusim("run", TINY, "--set", load, "--set", "model.kernels.rms_norm=probe", "--set",
                                    set_cache, "-o", dir, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    ts_run_free(&r);
    char json[1100];
    snprintf(json, sizeof json, "%s/summary.json", dir);
    char *text = ts_read(json);
    step[i] = json_num(text, NULL, "step_time_s");
    free(text);
    free(so);
  }
  /* 200,000 scalar cycles per row instead of 1,000: the second build's norms cost far more */
  cr_assert(step[1] > step[0] * 1.5, "step %.6g s with the slow build, %.6g s with the fast one", step[1], step[0]);
  ts_rmtree(dir);
  free(dir);
}

Test(plugins, kernel_help_lists_an_operators_parameters)
{
  struct run_result r = ts_npusim("kernel", "gemm", "--help", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "--m dim") && strstr(r.out, "--swizzle") && strstr(r.out, "backward ("), "%s", r.out);
  ts_run_free(&r);
  char *dir = ts_tmpdir();
  char *so = build_probe(dir, "probe.so", "");
  r = ts_npusim("kernel", "probe", "--help", "--load", so, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.out, "probe\n  a probe\n  loaded from ") && strstr(r.out, "--hidden dim"), "%s", r.out);
  ts_run_free(&r);
  r = ts_npusim("kernel", "--help", NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strstr(r.out, "usage: npusim kernel list"), "%s", r.out);
  ts_run_free(&r);
  free(so);
  ts_rmtree(dir);
  free(dir);
}

/* make install puts the presets, model presets, validation scenarios and calibration data under
 * PREFIX/share/npusim, and the installed npusim reads them there, not from the source tree (a
 * preset removed from the install is unknown to it); the manual page and the bash completion
 * are installed, and --version names the commit. */
Test(plugins, an_installed_npusim_reads_its_own_data_and_has_a_manual_and_completion)
{
  char *dir = ts_tmpdir();
  install(dir);
  char npusim[1024], path[1100], moved[1100];
  snprintf(npusim, sizeof npusim, "%s/prefix/bin/npusim", dir);
  const char *const files[] = {"share/npusim/arch/presets/ascend-910b2.cfg", "share/npusim/scenarios/models/llama2-7b.cfg",
                               "share/npusim/scenarios/validation/mindspeed_llama2_7b.cfg",
                               "share/npusim/calibration/data/gemm.csv", "share/man/man1/npusim.1",
                               "share/bash-completion/completions/npusim"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/prefix/%s", dir, files[i]);
    cr_assert(access(path, R_OK) == 0, "%s installed", files[i]);
  }
  char *argv1[] = {npusim, "arch", "show", "ascend-910b2", NULL};
  struct run_result r = ts_run(argv1, NULL);
  cr_assert_eq(r.status, 0, "%s", r.err);
  ts_run_free(&r);
  snprintf(path, sizeof path, "%s/prefix/share/npusim/arch/presets/ascend-910b2.cfg", dir);
  snprintf(moved, sizeof moved, "%s/moved.cfg", dir);
  cr_assert_eq(rename(path, moved), 0);
  r = ts_run(argv1, NULL);
  cr_assert_eq(r.status, 2, "the installed npusim reads its own presets: %s", r.out);
  cr_assert(strstr(r.err, "unknown preset 'ascend-910b2'"), "%s", r.err);
  ts_run_free(&r);
  char *argv2[] = {npusim, "--version", NULL};
  r = ts_run(argv2, NULL);
  cr_assert_eq(r.status, 0);
  cr_assert(strncmp(r.out, "npusim ", 7) == 0 && strstr(r.out, " (commit "), "%s", r.out);
  ts_run_free(&r);
  snprintf(path, sizeof path, "%s/prefix/share/man/man1/npusim.1", dir);
  char *man = ts_read(path);
  cr_assert(man && !strncmp(man, ".TH NPUSIM 1", 12) && strstr(man, ".SS run\n"), "%s", man ? man : "");
  free(man);
  snprintf(path, sizeof path, "%s/prefix/share/bash-completion/completions/npusim", dir);
  char *comp = ts_read(path);
  cr_assert(comp && strstr(comp, "complete -o filenames -F _npusim npusim") && strstr(comp, "  run) opts=\"") &&
                strstr(comp, "--html"),
            "%s", comp ? comp : "");
  free(comp);
  ts_rmtree(dir);
  free(dir);
}
