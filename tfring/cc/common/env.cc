#include "env.h"

#include <cstdlib>



namespace tfring {

const std::vector<Knob>& KnobTable() {
  static const std::vector<Knob> table = {
      {"TFRING_FUSION_THRESHOLD", KnobType::INT, "67108864",
       "Bytes of small allreduces packed into one fusion buffer per collective call (0 disables fusion)."},
      {"TFRING_CYCLE_TIME", KnobType::DOUBLE, "1",
       "Milliseconds the background thread waits for more work before negotiating an idle cycle."},
      {"TFRING_CACHE_CAPACITY", KnobType::INT, "1024",
       "Responses kept for the steady-state bit-vector fast path (0 disables the cache)."},
      {"TFRING_LOG_LEVEL", KnobType::STRING, "warning", "trace, debug, info, warning or error."},
  };
  return table;
}

std::string KnobValue(const std::string& name) {
  if (const char* v = std::getenv(name.c_str())) return v;
  std::string alias = "HOROVOD_" + name.substr(std::string("TFRING_").size());
  if (const char* v = std::getenv(alias.c_str())) return v;
  for (const auto& k : KnobTable())
    if (name == k.name) return k.default_value;
  return "";
}

static int ParseLogLevel(const std::string& v) {
  static const char* names[] = {"trace", "debug", "info", "warning", "error"};
  for (int i = 0; i < 5; ++i)
    if (v == names[i]) return i;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (end && *end == '\0' && !v.empty()) return static_cast<int>(n);
  return 3;
}

Settings Settings::FromEnvironment() {
  Settings s;
  s.fusion_threshold_bytes = std::atoll(KnobValue("TFRING_FUSION_THRESHOLD").c_str());
  s.cycle_time_ms = std::atof(KnobValue("TFRING_CYCLE_TIME").c_str());
  s.cache_capacity = std::atoll(KnobValue("TFRING_CACHE_CAPACITY").c_str());
  s.log_level = ParseLogLevel(KnobValue("TFRING_LOG_LEVEL"));
  if (s.fusion_threshold_bytes < 0) s.fusion_threshold_bytes = 0;
  if (s.cycle_time_ms < 0) s.cycle_time_ms = 0;
  if (s.cache_capacity < 0) s.cache_capacity = 0;
  return s;
}

}  // namespace tfring
