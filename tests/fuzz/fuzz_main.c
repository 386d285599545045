/* fuzz_main.c - one libFuzzer binary per target: FUZZ_TARGET names it (tests/fuzz/CMakeLists.txt). */
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  return FUZZ_TARGET(data, size);
}
