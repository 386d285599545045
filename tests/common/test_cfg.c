/* test_cfg.c - the generic parameter loader: types, units, presets, overrides, origins. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/err.h"
#include "tests/support/support.h"

struct sample {
  int count;
  double ratio;
  bool flag;
  char name[8];
  int color;
  double bw;
  uint64_t size;
  double lat;
  int opt;
};

static const char *const colors[] = {"red", "green", "blue", NULL};

#define O(f) offsetof(struct sample, f)
static const struct npu_param params[] = {
    {"x.count", NPU_PT_INT, O(count), 0, NULL, NPU_PF_POSITIVE, 0, 0, NULL, "a count"},
    {"x.ratio", NPU_PT_REAL, O(ratio), 0, "0.5", NPU_PF_FRACTION, 0, 0, NULL, "a fraction"},
    {"x.flag", NPU_PT_BOOL, O(flag), 0, "false", 0, 0, 0, NULL, "a flag"},
    {"x.name", NPU_PT_STRING, O(name), sizeof(((struct sample *)0)->name), "anon", 0, 0, 0, NULL,
     "a name"},
    {"x.color", NPU_PT_ENUM, O(color), 0, "red", 0, 0, 0, colors, "a color"},
    {"x.link.bandwidth", NPU_PT_BANDWIDTH, O(bw), 0, NULL, NPU_PF_POSITIVE, 0, 0, NULL, "bw"},
    {"x.link.latency", NPU_PT_TIME, O(lat), 0, "1us", NPU_PF_NONNEG, 0, 0, NULL, "latency"},
    {"x.size", NPU_PT_SIZE, O(size), 0, "1KiB", 0, 0, 0, NULL, "size"},
    {"y.opt", NPU_PT_INT, O(opt), 0, NULL, 0, 1, 9, NULL, "an optional section's key"},
};
static const struct npu_section sections[] = {{"x", true, "the x part"}, {"y", false, "y"}};
static const struct npu_table table = {sections, 2, params, sizeof params / sizeof params[0]};

static char *dir;
static struct npu_cfg *cfg;
static struct sample s;
static struct npu_diag d;

static void setup(void)
{
  dir = ts_tmpdir();
  cfg = npu_cfg_create();
  npu_cfg_add_table(cfg, &table, &s);
  npu_cfg_add_preset_dir(cfg, dir);
  npu_cfg_set_display_root(cfg, dir);
  npu_diag_clear(&d);
}

static void teardown(void)
{
  npu_cfg_destroy(cfg);
  ts_rmtree(dir);
  free(dir);
}

static int load_text(const char *name, const char *text)
{
  char *p = ts_write(dir, name, text);
  int rc = npu_cfg_load_file(cfg, p, &d);
  free(p);
  return rc;
}

static const char *diag_text(void)
{
  static char buf[2048];
  npu_diag_format(&d, buf, sizeof buf);
  return buf;
}

TestSuite(cfg, .init = setup, .fini = teardown, .timeout = 10);

Test(cfg, defaults_then_file_values_with_units)
{
  cr_assert_eq(s.ratio, 0.5);
  cr_assert_str_eq(s.name, "anon");
  cr_assert_eq(s.size, 1024);
  cr_assert_eq(load_text("a.cfg", "x = {\n count = 3;\n link = { bandwidth = \"200Gbps\"; };\n"
                                  " color = \"blue\";\n flag = true;\n ratio = 1;\n};\n"),
               0, "%s", diag_text());
  cr_assert_eq(npu_cfg_finish(cfg, &d), 0, "%s", diag_text());
  cr_assert_eq(s.count, 3);
  cr_assert_eq(s.bw, 25e9);
  cr_assert_eq(s.color, 2);
  cr_assert(s.flag);
  cr_assert_eq(s.ratio, 1.0);
  cr_assert_eq(s.lat, 1e-6);
  const struct npu_origin *o = npu_cfg_origin(cfg, "x.link.bandwidth");
  cr_assert_eq(o->kind, NPU_ORIGIN_FILE);
  cr_assert_str_eq(o->file, "a.cfg");
  cr_assert_eq(o->line, 3);
  cr_assert_eq(npu_cfg_origin(cfg, "x.link.latency")->kind, NPU_ORIGIN_DEFAULT);
  cr_assert(!npu_cfg_section_present(cfg, "y"));
}

Test(cfg, unknown_key_gets_a_suggestion)
{
  cr_assert_neq(load_text("a.cfg", "x = {\n  count = 1;\n  link = { bandwdth = \"1GBps\"; };\n};\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:3: x.link.bandwdth: unknown key; did you mean 'x.link.bandwidth'?");
}

Test(cfg, unknown_key_without_a_close_match_lists_the_group)
{
  cr_assert_neq(load_text("a.cfg", "x = { link = { speed = \"1GBps\"; }; };\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:1: x.link.speed: unknown key (valid keys in 'x.link': bandwidth, latency)");
}

Test(cfg, unknown_section)
{
  cr_assert_neq(load_text("a.cfg", "z = { count = 1; };\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:1: z: unknown key; did you mean 'x'?");
}

Test(cfg, wrong_types_are_named)
{
  cr_assert_neq(load_text("a.cfg", "x = { count = \"3\"; };\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:1: x.count: expected an integer, got a string \"3\"");
  cr_assert_neq(load_text("b.cfg", "x = { count = 2.5; };\n"), 0);
  cr_assert_str_eq(diag_text(), "b.cfg:1: x.count: expected an integer, got a number 2.5");
  cr_assert_neq(load_text("c.cfg", "x = { link = { bandwidth = 56; }; };\n"), 0);
  cr_assert_str_eq(diag_text(), "c.cfg:1: x.link.bandwidth: missing unit: expected a bandwidth like '1.6TBps', got 56");
  cr_assert_neq(load_text("d.cfg", "x = { flag = 1; };\n"), 0);
  cr_assert_str_eq(diag_text(), "d.cfg:1: x.flag: expected a boolean (true or false), got an integer 1");
  cr_assert_neq(load_text("e.cfg", "x = { count = [1, 2]; };\n"), 0);
  cr_assert_str_eq(diag_text(), "e.cfg:1: x.count: expected an integer, got an array");
  cr_assert_neq(load_text("f.cfg", "x = 3;\n"), 0);
  cr_assert_str_eq(diag_text(), "f.cfg:1: x: expected a group 'x = { ... };', got an integer");
}

Test(cfg, ranges_and_units)
{
  cr_assert_neq(load_text("a.cfg", "x = { count = 0; };\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:1: x.count: must be positive, got '0'");
  cr_assert_neq(load_text("b.cfg", "x = { ratio = 1.5; };\n"), 0);
  cr_assert_str_eq(diag_text(), "b.cfg:1: x.ratio: must be a fraction in (0, 1], got '1.5'");
  cr_assert_neq(load_text("c.cfg", "x = { link = { bandwidth = \"56GHz\"; }; };\n"), 0);
  cr_assert_str_eq(diag_text(), "c.cfg:1: x.link.bandwidth: expected a bandwidth like '1.6TBps', got '56GHz' (a frequency)");
  cr_assert_neq(load_text("d.cfg", "x = { link = { latency = \"-2us\"; }; };\n"), 0);
  cr_assert_str_eq(diag_text(), "d.cfg:1: x.link.latency: must not be negative, got '-2us'");
  cr_assert_neq(load_text("e.cfg", "y = { opt = 10; };\n"), 0);
  cr_assert_str_eq(diag_text(), "e.cfg:1: y.opt: must be between 1 and 9, got '10'");
  cr_assert_neq(load_text("f.cfg", "x = { size = \"1.5B\"; };\n"), 0);
  cr_assert_str_eq(diag_text(), "f.cfg:1: x.size: expected a whole number of bytes, got '1.5B'");
  cr_assert_neq(load_text("g.cfg", "x = { color = \"gren\"; };\n"), 0);
  cr_assert_str_eq(diag_text(), "g.cfg:1: x.color: unknown value 'gren'; did you mean 'green'? (one of: red, green, blue)");
  cr_assert_neq(load_text("h.cfg", "x = { name = \"much too long\"; };\n"), 0);
  cr_assert_str_eq(diag_text(), "h.cfg:1: x.name: string too long (at most 7 characters)");
}

Test(cfg, syntax_error_and_missing_include_are_located)
{
  cr_assert_neq(load_text("a.cfg", "x = {\n  count = ;\n};\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:2: syntax error");
  cr_assert_neq(load_text("b.cfg", "x = { count = 1; };\n@include \"nowhere.cfg\"\n"), 0);
  char want[1024];
  snprintf(want, sizeof want, "b.cfg:2: cannot open include file 'nowhere.cfg' (looked in '%s')", dir);
  cr_assert_str_eq(diag_text(), want);
  cr_assert_neq(npu_cfg_load_file(cfg, "/nonexistent/file.cfg", &d), 0);
  cr_assert_str_eq(diag_text(), "/nonexistent/file.cfg: cannot open: No such file or directory");
}

Test(cfg, include_relative_to_the_file)
{
  free(ts_write(dir, "part.cfg", "  count = 7;\n"));
  cr_assert_eq(load_text("a.cfg", "x = {\n@include \"part.cfg\"\n  link = { bandwidth = \"1GBps\"; };\n};\n"), 0,
               "%s", diag_text());
  cr_assert_eq(s.count, 7);
  cr_assert_str_eq(npu_cfg_origin(cfg, "x.count")->file, "part.cfg");
  cr_assert_eq(npu_cfg_origin(cfg, "x.count")->line, 1);
}

Test(cfg, required_keys_and_sections)
{
  cr_assert_neq(npu_cfg_finish(cfg, &d), 0);
  cr_assert_str_eq(diag_text(), "x: missing required section 'x' (the x part)");
  cr_assert_eq(load_text("a.cfg", "x = {\n  count = 1;\n};\n"), 0);
  cr_assert_neq(npu_cfg_finish(cfg, &d), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:1: x.link.bandwidth: missing required key in section 'x' (bw)");
}

Test(cfg, presets_by_name_and_by_section)
{
  free(ts_write(dir, "base.cfg", "x = { count = 2; name = \"base\"; link = { bandwidth = \"1GBps\"; latency = \"3us\"; }; };\n"
                                 "y = { opt = 4; };\n"));
  free(ts_write(dir, "other.cfg", "x = { count = 9; link = { bandwidth = \"9GBps\"; }; };\n"));
  cr_assert_eq(load_text("a.cfg", "preset = \"base\";\nx = { count = 5; };\n"), 0, "%s", diag_text());
  cr_assert_eq(npu_cfg_finish(cfg, &d), 0, "%s", diag_text());
  cr_assert_eq(s.count, 5);
  cr_assert_eq(s.bw, 1e9);
  cr_assert_eq(s.opt, 4);
  cr_assert(npu_cfg_section_present(cfg, "y"));
  cr_assert_str_eq(npu_cfg_origin(cfg, "x.link.latency")->file, "base.cfg");

  /* a section preset resets that section: latency goes back to its default */
  cr_assert_eq(load_text("b.cfg", "x = { preset = \"other\"; name = \"mine\"; };\n"), 0, "%s", diag_text());
  cr_assert_eq(s.count, 9);
  cr_assert_eq(s.bw, 9e9);
  cr_assert_eq(s.lat, 1e-6);
  cr_assert_str_eq(s.name, "mine");
  cr_assert_eq(s.opt, 4); /* other sections untouched */
}

Test(cfg, unknown_preset_gets_a_suggestion)
{
  free(ts_write(dir, "ascend-910b2.cfg", "x = { count = 2; };\n"));
  cr_assert_neq(load_text("a.cfg", "\npreset = \"ascend-910b7\";\n"), 0);
  cr_assert_str_eq(diag_text(), "a.cfg:2: preset: unknown preset 'ascend-910b7'; did you mean 'ascend-910b2'?");
  cr_assert_neq(npu_cfg_load_spec(cfg, "nvidia-b200", &d), 0);
  cr_assert_str_eq(diag_text(), "unknown preset 'nvidia-b200' (see 'npusim arch list' for the presets)");
}

Test(cfg, preset_cycles_are_caught)
{
  free(ts_write(dir, "p.cfg", "preset = \"q\";\n"));
  free(ts_write(dir, "q.cfg", "preset = \"p\";\n"));
  cr_assert_neq(npu_cfg_load_preset(cfg, "p", &d), 0);
  cr_assert(strstr(diag_text(), "preset cycle") != NULL, "%s", diag_text());
}

Test(cfg, command_line_overrides)
{
  cr_assert_eq(npu_cfg_set(cfg, "x.count=12", &d), 0, "%s", diag_text());
  cr_assert_eq(s.count, 12);
  cr_assert_eq(npu_cfg_origin(cfg, "x.count")->kind, NPU_ORIGIN_CMDLINE);
  cr_assert_eq(npu_cfg_set(cfg, "x.link.bandwidth=3.2TBps", &d), 0);
  cr_assert_eq(s.bw, 3.2e12);
  cr_assert_eq(npu_cfg_set(cfg, "x.name=\"q\"", &d), 0);
  cr_assert_str_eq(s.name, "q");
  cr_assert_eq(npu_cfg_finish(cfg, &d), 0, "%s", diag_text());

  cr_assert_neq(npu_cfg_set(cfg, "x.count", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: --set 'x.count': expected KEY=VALUE");
  cr_assert_neq(npu_cfg_set(cfg, "=3", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: --set '=3': expected KEY=VALUE");
  cr_assert_neq(npu_cfg_set(cfg, "x..count=3", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: --set 'x..count=3': malformed key 'x..count'");
  cr_assert_neq(npu_cfg_set(cfg, "x.count=", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: x.count: --set 'x.count=': missing value after '='");
  cr_assert_neq(npu_cfg_set(cfg, "x.cuont=3", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: x.cuont: unknown key; did you mean 'x.count'?");
  cr_assert_neq(npu_cfg_set(cfg, "x.count=many", &d), 0);
  cr_assert_str_eq(diag_text(), "command line: x.count: expected an integer, got 'many'");
}

Test(cfg, cross_field_failures_name_the_origin)
{
  cr_assert_eq(load_text("a.cfg", "x = {\n  count = 1;\n  link = { bandwidth = \"1GBps\"; };\n};\n"), 0);
  npu_cfg_fail(cfg, &d, "x.link.bandwidth", "too slow for %d", 3);
  cr_assert_str_eq(diag_text(), "a.cfg:3: x.link.bandwidth: too slow for 3");
  npu_cfg_fail(cfg, &d, "x.ratio", "defaulted");
  cr_assert_str_eq(diag_text(), "a.cfg:1: x.ratio: defaulted");
}

Test(cfg, effective_configuration_loads_back_to_the_same_values)
{
  cr_assert_eq(load_text("a.cfg", "x = { count = 3; ratio = 0.1; link = { bandwidth = \"200Gbps\"; }; };\n"
                                  "y = { opt = 2; };\n"), 0);
  cr_assert_eq(npu_cfg_set(cfg, "x.size=3MiB", &d), 0);
  struct npu_buf b = {0};
  npu_cfg_write_config(cfg, &b);
  cr_assert_str_eq(npu_buf_str(&b),
                   "x = {\n"
                   "  count = 3;  # a.cfg:1\n"
                   "  ratio = 0.1;  # a.cfg:1\n"
                   "  flag = false;  # default\n"
                   "  name = \"anon\";  # default\n"
                   "  color = \"red\";  # default\n"
                   "  link = {\n"
                   "    bandwidth = \"25GBps\";  # a.cfg:1\n"
                   "    latency = \"1us\";  # default\n"
                   "  };\n"
                   "  size = \"3MiB\";  # --set\n"
                   "};\n"
                   "y = {\n"
                   "  opt = 2;  # a.cfg:2\n"
                   "};\n");
  struct sample s2;
  struct npu_cfg *c2 = npu_cfg_create();
  npu_cfg_add_table(c2, &table, &s2);
  char *p = ts_write(dir, "eff.cfg", npu_buf_str(&b));
  cr_assert_eq(npu_cfg_load_file(c2, p, &d), 0, "%s", diag_text());
  for (size_t i = 0; i < table.nparams; i++) {
    char v1[128], v2[128];
    npu_cfg_format_value(cfg, params[i].name, v1, sizeof v1);
    npu_cfg_format_value(c2, params[i].name, v2, sizeof v2);
    cr_assert_str_eq(v1, v2, "%s", params[i].name);
  }
  free(p);
  npu_cfg_destroy(c2);
  npu_buf_release(&b);
}

Test(cfg, json_groups_and_unit_suffixes)
{
  cr_assert_eq(load_text("a.cfg", "x = { count = 3; link = { bandwidth = \"1.6TBps\"; }; };\n"), 0);
  struct npu_buf b = {0};
  struct npu_json j;
  npu_json_init(&j, &b);
  npu_cfg_write_json(cfg, "x", &j);
  npu_json_finish(&j);
  cr_assert_str_eq(npu_buf_str(&b),
                   "{\n"
                   "  \"count\": 3,\n"
                   "  \"ratio\": 0.5,\n"
                   "  \"flag\": false,\n"
                   "  \"name\": \"anon\",\n"
                   "  \"color\": \"red\",\n"
                   "  \"link\": {\n"
                   "    \"bandwidth_bytes_per_s\": 1600000000000,\n"
                   "    \"latency_s\": 0.000001\n"
                   "  },\n"
                   "  \"size_bytes\": 1024\n"
                   "}\n");
  npu_buf_release(&b);
}

static const struct npu_param scattered[] = {
    {"x.a.one", NPU_PT_INT, 0, 0, "1", 0, 0, 0, NULL, ""},
    {"x.b", NPU_PT_INT, 0, 0, "1", 0, 0, 0, NULL, ""},
    {"x.a.two", NPU_PT_INT, 0, 0, "1", 0, 0, 0, NULL, ""},
};

Test(cfg, a_group_split_in_the_table_is_a_bug, .signal = SIGABRT)
{
  static const struct npu_section sec[] = {{"x", false, ""}};
  static const struct npu_table t = {sec, 1, scattered, 3};
  struct npu_cfg *c = npu_cfg_create();
  int target[4];
  npu_cfg_add_table(c, &t, target);
}

/* An optional key without a default (NPU_PF_OPTIONAL) may stay unset: finish accepts it, its
 * origin says so, the writers leave it out and the key list says "unset". */
struct opt_sample {
  int a;
  int b;
};
static const struct npu_param opt_params[] = {
    {"z.a", NPU_PT_INT, offsetof(struct opt_sample, a), 0, NULL, NPU_PF_OPTIONAL, 0, 0, NULL, "may stay unset"},
    {"z.b", NPU_PT_INT, offsetof(struct opt_sample, b), 0, "3", 0, 0, 0, NULL, "has a default"},
};
static const struct npu_section opt_sections[] = {{"z", false, "z"}};
static const struct npu_table opt_table = {opt_sections, 1, opt_params, 2};

Test(cfg, optional_keys_may_stay_unset)
{
  struct opt_sample z;
  npu_cfg_add_table(cfg, &opt_table, &z);
  cr_assert_eq(load_text("o.cfg", "x = { count = 1; link = { bandwidth = \"1GBps\"; }; };\nz = { b = 4; };\n"), 0, "%s",
               diag_text());
  cr_assert_eq(npu_cfg_finish(cfg, &d), 0, "%s", diag_text());
  cr_assert_eq(npu_cfg_origin(cfg, "z.a")->kind, NPU_ORIGIN_UNSET);
  struct npu_buf b = {0};
  npu_cfg_write_config(cfg, &b);
  cr_assert(strstr(npu_buf_str(&b), "b = 4;") && !strstr(npu_buf_str(&b), "a = "), "%s", npu_buf_str(&b));
  npu_buf_release(&b);
  npu_cfg_write_keys(cfg, &b);
  cr_assert(strstr(npu_buf_str(&b), "| `z.a` | integer | unset | may stay unset |\n") != NULL, "%s", npu_buf_str(&b));
  npu_buf_release(&b);
  cr_assert_eq(npu_cfg_set(cfg, "z.a=7", &d), 0);
  cr_assert_eq(z.a, 7);
  cr_assert_eq(npu_cfg_origin(cfg, "z.a")->kind, NPU_ORIGIN_CMDLINE);
}
