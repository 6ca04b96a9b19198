// Fusion planning: merge allreduce responses that can share one buffer (same dtype, reduce op, scale
// factors and joined count) up to the threshold. Pure and deterministic, so every rank plans the same.
#pragma once
#include <vector>

#include "message.h"

namespace tfring {

std::vector<Response> PlanFusion(std::vector<Response> responses, int64_t threshold_bytes);

}  // namespace tfring
