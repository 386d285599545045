/* dtype.c - data type names and widths. */
#include "common/dtype.h"

#include <string.h>

#include "common/err.h"

static const char *const names[NPU_DT_COUNT + 1] = {
#define NPU__DT_NAME(e, name, bits) name,
    NPU_DTYPE_MAP(NPU__DT_NAME)
#undef NPU__DT_NAME
        NULL};

static const int bits[NPU_DT_COUNT] = {
#define NPU__DT_BITS(e, name, b) b,
    NPU_DTYPE_MAP(NPU__DT_BITS)
#undef NPU__DT_BITS
};

const char *npu_dtype_name(enum npu_dtype t)
{
  NPU_ASSERT(t >= 0 && t < NPU_DT_COUNT);
  return names[t];
}

int npu_dtype_bits(enum npu_dtype t)
{
  NPU_ASSERT(t >= 0 && t < NPU_DT_COUNT);
  return bits[t];
}

bool npu_dtype_parse(const char *name, enum npu_dtype *out)
{
  for (int i = 0; i < NPU_DT_COUNT; i++)
    if (strcmp(names[i], name) == 0) {
      *out = (enum npu_dtype)i;
      return true;
    }
  return false;
}

const char *const *npu_dtype_names(void)
{
  return names;
}
