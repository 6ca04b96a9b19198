// The knob table: one row per setting, typed parsing, defaults and warnings for bad values, HOROVOD_ aliases.
#include <cstdlib>
#include <set>

#include "../../tfring/cc/common/env.h"
#include "check.h"

using tfring::Knob;
using tfring::KnobTable;
using tfring::ParseKnob;
using tfring::Settings;

static const Knob& Row(const char* name) {
  for (const auto& k : KnobTable())
    if (std::string(k.name) == name) return k;
  std::fprintf(stderr, "no knob %s\n", name);
  std::abort();
}

TEST(knob_rows_are_unique_and_typed) {
  std::set<std::string> names;
  for (const auto& k : KnobTable()) {
    EXPECT(names.insert(k.name).second);
    int fields = (k.int_field != nullptr) + (k.double_field != nullptr) + (k.bool_field != nullptr) +
                 (k.string_field != nullptr);
    EXPECT_EQ(fields, k.read_by_core() ? 1 : 0);  // a Python-side row has none
    Settings s{};
    EXPECT_EQ(ParseKnob(k, k.default_value, &s), "");  // every default parses cleanly
    // A flag's spelling: "--x", or a boolean's "--on|--off" pair; a config key "section.key".
    const std::string flag = k.flag, config = k.config;
    EXPECT(flag.empty() ||
           (flag.rfind("--", 0) == 0 && (flag.find('|') == std::string::npos) == (k.type != tfring::KnobType::BOOL)));
    EXPECT(config.empty() || (!flag.empty() && config.find('.') != std::string::npos));
    EXPECT(flag.empty() == (*k.group == 0) && flag.empty() == (*k.flag_help == 0));
  }
}

TEST(knob_int_parses_whole_value_or_warns_and_uses_default) {
  Settings s{};
  const Knob& k = Row("TFRING_FUSION_THRESHOLD");
  EXPECT_EQ(ParseKnob(k, "1048576", &s), "");
  EXPECT_EQ(s.fusion_threshold_bytes, 1048576);
  std::string w = ParseKnob(k, "8MB", &s);
  EXPECT(w.find("TFRING_FUSION_THRESHOLD=8MB") != std::string::npos);
  EXPECT(w.find("an integer") != std::string::npos);
  EXPECT_EQ(s.fusion_threshold_bytes, 8388608);
  EXPECT(!ParseKnob(k, "", &s).empty());
  w = ParseKnob(k, "-5", &s);  // clamped to the range, reported
  EXPECT(w.find("outside") != std::string::npos);
  EXPECT_EQ(s.fusion_threshold_bytes, 0);
}

TEST(knob_double_bool_level_string) {
  Settings s{};
  EXPECT_EQ(ParseKnob(Row("TFRING_CYCLE_TIME"), "2.5", &s), "");
  EXPECT_EQ(s.cycle_time_ms, 2.5);
  EXPECT(!ParseKnob(Row("TFRING_CYCLE_TIME"), "fast", &s).empty());
  EXPECT_EQ(s.cycle_time_ms, 1.0);
  EXPECT(!ParseKnob(Row("TFRING_CYCLE_TIME"), "nan", &s).empty());
  for (const char* t : {"1", "true", "True", "YES", "on"}) {
    s.autotune = false;
    EXPECT_EQ(ParseKnob(Row("TFRING_AUTOTUNE"), t, &s), "");
    EXPECT(s.autotune);
  }
  EXPECT_EQ(ParseKnob(Row("TFRING_AUTOTUNE"), "off", &s), "");
  EXPECT(!s.autotune);
  s.autotune = true;
  EXPECT(ParseKnob(Row("TFRING_AUTOTUNE"), "maybe", &s).find("boolean") != std::string::npos);
  EXPECT(!s.autotune);
  EXPECT_EQ(ParseKnob(Row("TFRING_LOG_LEVEL"), "DEBUG", &s), "");
  EXPECT_EQ(s.log_level, 1);
  EXPECT_EQ(ParseKnob(Row("TFRING_LOG_LEVEL"), "0", &s), "");
  EXPECT_EQ(s.log_level, 0);
  EXPECT(!ParseKnob(Row("TFRING_LOG_LEVEL"), "loud", &s).empty());
  EXPECT_EQ(s.log_level, 3);
  EXPECT_EQ(ParseKnob(Row("TFRING_TIMELINE"), "/tmp/t.json", &s), "");
  EXPECT_EQ(s.timeline_path, "/tmp/t.json");
  EXPECT(!ParseKnob(Row("TFRING_AUTOTUNE_SAMPLE_SECONDS"), "0", &s).empty());  // below 0.01: clamped
  EXPECT_EQ(s.autotune_sample_seconds, 0.01);
}

TEST(knob_settings_from_environment_with_aliases_and_disable) {
  setenv("HOROVOD_CYCLE_TIME", "3", 1);
  setenv("TFRING_CACHE_CAPACITY", "7", 1);
  setenv("HOROVOD_CACHE_CAPACITY", "9", 1);  // the TFRING_ name wins
  setenv("TFRING_STALL_CHECK_DISABLE", "true", 1);
  Settings s = Settings::FromEnvironment();
  EXPECT_EQ(s.cycle_time_ms, 3.0);
  EXPECT_EQ(s.cache_capacity, 7);
  EXPECT_EQ(s.stall_check_seconds, 0.0);
  EXPECT_EQ(s.stall_shutdown_seconds, 0.0);
  EXPECT_EQ(s.mpi_max_count, 2147483647);
  for (const char* v :
       {"HOROVOD_CYCLE_TIME", "TFRING_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", "TFRING_STALL_CHECK_DISABLE"})
    unsetenv(v);
}
