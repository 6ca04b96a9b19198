// Multiply a buffer in place by a factor (prescale/postscale, Average = Sum then 1/n).
#pragma once
#include <cstdint>

#include "../types.h"

namespace tfring {

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor);

// Divide in place by a rank count (Average). Integers use C++ division (truncation, like tf.math.truncatediv);
// floats are divided, not multiplied by 1/n, so results match numpy's sum / n exactly.
void DivideBuffer(void* data, int64_t count, DataType dtype, int divisor);

}  // namespace tfring
