#include "logging.h"

#include <atomic>
#include <cstdio>

namespace tfring {

static std::atomic<int> g_level{3};
static std::atomic<int> g_rank{-1};

void SetLogLevel(int level) { g_level = level; }
int GetLogLevel() { return g_level; }
void SetLogRank(int rank) { g_rank = rank; }

void EmitLog(int level, const std::string& msg) {
  static const char* names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR"};
  const char* name = (level >= 0 && level < 5) ? names[level] : "LOG";
  // One fprintf per line so lines from threads and ranks never interleave mid-line.
  std::fprintf(stderr, "[tfring %s rank %d] %s\n", name, g_rank.load(), msg.c_str());
}

}  // namespace tfring
