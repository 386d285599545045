/* test_json.c - the JSON writer's exact output. */
#include <criterion/criterion.h>
#include <signal.h>

#include "common/json.h"

Test(json, writes_nested_values_deterministically, .timeout = 10)
{
  struct npu_buf b = {0};
  struct npu_json j;
  npu_json_init(&j, &b);
  npu_json_object_begin(&j);
  npu_json_key(&j, "name");
  npu_json_string(&j, "a \"q\"\n");
  npu_json_key(&j, "peak");
  npu_json_number(&j, 353894400000000.0);
  npu_json_key(&j, "list");
  npu_json_array_begin(&j);
  npu_json_int(&j, -3);
  npu_json_bool(&j, true);
  npu_json_null(&j);
  npu_json_number(&j, 1.0 / 0.0);
  npu_json_array_end(&j);
  npu_json_key(&j, "empty");
  npu_json_object_begin(&j);
  npu_json_object_end(&j);
  npu_json_object_end(&j);
  npu_json_finish(&j);
  cr_assert_str_eq(npu_buf_str(&b),
                   "{\n"
                   "  \"name\": \"a \\\"q\\\"\\n\",\n"
                   "  \"peak\": 353894400000000,\n"
                   "  \"list\": [\n"
                   "    -3,\n"
                   "    true,\n"
                   "    null,\n"
                   "    null\n"
                   "  ],\n"
                   "  \"empty\": {}\n"
                   "}\n");
  npu_buf_release(&b);
}

Test(json, value_without_key_in_object_is_a_bug, .signal = SIGABRT, .timeout = 10)
{
  struct npu_buf b = {0};
  struct npu_json j;
  npu_json_init(&j, &b);
  npu_json_object_begin(&j);
  npu_json_int(&j, 1);
}
