// What the user's code calls a collective: the framework bindings register, for a negotiated name, a label such
// as "gradient of dense_1/kernel" (the optimizer and the tape know which gradient is which), and the stall
// inspector shows it next to the name. Process-wide, thread-safe, bounded.
#pragma once
#include <string>

namespace tfring {

void SetTensorLabel(const std::string& name, const std::string& label);
std::string TensorLabel(const std::string& name);  // "" if none

}  // namespace tfring
