// Multiply a buffer in place by a factor (prescale/postscale, Average = Sum then 1/n).
#pragma once
#include <cstdint>

#include "../types.h"

namespace tfring {

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor);

// Divide in place by a rank count (Average). Integers use C++ division (truncation, like tf.math.truncatediv);
// floats are divided, not multiplied by 1/n, so results match numpy's sum / n exactly.
void DivideBuffer(void* data, int64_t count, DataType dtype, int divisor);

// After the reduction: postscale, then (divisor > 1: Average) the division. 16-bit floats take one rounding of
// x * (postscale / divisor), as Horovod: with gradient_predivide_factor the sum times postscale alone can
// overflow float16 (2 ranks x 40000 / 2 * 2 = 80000 > 65504) though the average fits.
void FinishReduction(void* data, int64_t count, DataType dtype, double postscale, int divisor);
bool CombinedScale(DataType dtype, double postscale, int divisor);  // FinishReduction scales once (GPU path too)

}  // namespace tfring
