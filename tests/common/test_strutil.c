/* test_strutil.c - edit distance, suggestions, growable strings. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/strutil.h"

Test(strutil, edit_distance, .timeout = 10)
{
  cr_assert_eq(npu_edit_distance("", ""), 0);
  cr_assert_eq(npu_edit_distance("abc", ""), 3);
  cr_assert_eq(npu_edit_distance("kitten", "sitting"), 3);
  cr_assert_eq(npu_edit_distance("bandwidth", "bandwdth"), 1);
  cr_assert_eq(npu_edit_distance("flaw", "lawn"), 2);
}

Test(strutil, suggests_only_plausible_typos, .timeout = 10)
{
  const char *c[] = {"chip.hbm.bandwidth", "chip.hbm.latency", NULL, "chip.clock"};
  cr_assert_str_eq(npu_suggest("chip.hbm.bandwdth", c, 4), "chip.hbm.bandwidth");
  cr_assert_str_eq(npu_suggest("chip.clk", c, 4), "chip.clock");
  cr_assert_null(npu_suggest("node.devices", c, 4));
  cr_assert_null(npu_suggest("x", c, 0));
}

Test(strutil, buffer_grows, .timeout = 10)
{
  struct npu_buf b = {0};
  cr_assert_str_eq(npu_buf_str(&b), "");
  for (int i = 0; i < 1000; i++) npu_buf_printf(&b, "%d,", i);
  cr_assert_eq(b.len, strlen(npu_buf_str(&b)));
  cr_assert(strncmp(npu_buf_str(&b), "0,1,2,", 6) == 0);
  cr_assert(strstr(npu_buf_str(&b), ",999,") != NULL);
  npu_buf_release(&b);
  cr_assert_null(b.data);

  char small[4];
  cr_assert_eq(npu_strlcpy(small, "abc", sizeof small), 1);
  cr_assert_eq(npu_strlcpy(small, "abcd", sizeof small), 0);
  cr_assert_str_eq(small, "abc");
}
