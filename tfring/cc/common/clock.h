// The core's clock for deadlines and durations: steady seconds (only differences mean anything).
#pragma once
#include <chrono>

namespace tfring {

inline double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tfring
