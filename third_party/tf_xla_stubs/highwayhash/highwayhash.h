// See arch_specific.h: declarations only (the printer that would use it is never built by tfring).
#pragma once
#include "highwayhash/arch_specific.h"
namespace highwayhash {
template <int Target>
class HighwayHashCatT {};
}  // namespace highwayhash
