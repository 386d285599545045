/* test_columns.c - the column-table writer: one declaration drives the CSV header and row,
 * JSON fields and the Markdown documentation; numbers in the shortest round-trip form. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "report/columns.h"

TestSuite(columns, .timeout = 10);

struct row {
  const char *name;
  long long n;
  double t, cat[3];
};

static const char *c_name(const void *x, int i) { (void)i; return ((const struct row *)x)->name; }
static long long c_n(const void *x, int i) { (void)i; return ((const struct row *)x)->n; }
static double c_t(const void *x, int i) { (void)i; return ((const struct row *)x)->t; }
static double c_cat(const void *x, int i) { return ((const struct row *)x)->cat[i]; }
static const char *cat_name(int i) { return (const char *[]){"gemm", "attention", "idle"}[i]; }

static const struct rpt_column cols[] = {
    {"name", RPT_STRING, "text", "a name", .text = c_name},
    {"count", RPT_INT, "", "a count", .integer = c_n},
    {"time_s", RPT_REAL, "s", "a time", .real = c_t},
    {"%s_s", RPT_REAL, "s", "time in %s", .real = c_cat, .count = 3, .index_name = cat_name, .index_desc = cat_name},
    {NULL},
};

Test(columns, csv_header_and_row_from_one_table)
{
  struct row r = {"a, \"b\"", 42, 0.1, {1.5, 1e-12, 0}};
  struct npu_buf b = {0};
  rpt_columns_csv_header(cols, &b);
  rpt_columns_csv_row(cols, &r, &b);
  cr_assert_str_eq(npu_buf_str(&b), "name,count,time_s,gemm_s,attention_s,idle_s\n"
                                    "\"a, \"\"b\"\"\",42,0.1,1.5,1e-12,0\n");
  npu_buf_release(&b);
  cr_assert_eq(rpt_columns_count(cols), 6);
  cr_assert_eq(rpt_columns_find(cols, "attention_s"), 4);
  cr_assert_eq(rpt_columns_find(cols, "nope"), -1);
}

Test(columns, numbers_read_back_exactly)
{
  static const double v[] = {5.970441114299055, 0.1 + 0.2, 1.0 / 3, 42759907328.0, 2e-5, 6.02e23, 1e-300};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char buf[64];
    rpt_fmt_number(v[i], buf, sizeof buf);
    cr_assert_eq(strtod(buf, NULL), v[i], "%s", buf);
  }
  char buf[64];
  rpt_fmt_number(0.5, buf, sizeof buf);
  cr_assert_str_eq(buf, "0.5");
  rpt_fmt_number(42759907328.0, buf, sizeof buf);
  cr_assert_str_eq(buf, "42759907328");
}

Test(columns, json_fields_and_markdown)
{
  struct row r = {"x", 7, 2.5, {1, 2, 3}};
  struct npu_buf b = {0};
  struct npu_json j;
  npu_json_init(&j, &b);
  npu_json_object_begin(&j);
  rpt_columns_json(cols, &r, &j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
  const char *s = npu_buf_str(&b);
  cr_assert(strstr(s, "\"name\"") && strstr(s, "\"x\"") && strstr(s, "\"count\": 7") && strstr(s, "\"idle_s\": 3"),
            "%s", s);
  npu_buf_release(&b);
  rpt_columns_markdown(cols, &b);
  s = npu_buf_str(&b);
  cr_assert(strstr(s, "| `time_s` | real | s | a time |\n") != NULL, "%s", s);
  cr_assert(strstr(s, "| `attention_s` | real | s | time in attention |\n") != NULL, "%s", s);
  cr_assert(strstr(s, "| `count` | integer | - | a count |\n") != NULL, "%s", s);
  npu_buf_release(&b);
}
