// Multiply a buffer in place by a factor (prescale/postscale, Average = Sum then 1/n).
#pragma once
#include <cstdint>

#include "../types.h"

namespace tfring {

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor);

}  // namespace tfring
