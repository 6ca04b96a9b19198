// The merged timeline: rank 0 writes another rank's shipped events on its own clock, moved by the offset the monitor
// measured (ranks on one host share a clock, so only an injected skew shows whether the offset is applied).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "../../tfring/cc/common/timeline.h"
#include "check.h"

using tfring::Timeline;

namespace {

// The "ts" of the first event of `pid` on a NEGOTIATE track in the timeline file.
long long TsOf(const std::string& json, int pid) {
  const std::string mark = ",\"pid\":" + std::to_string(pid) + ",";
  std::istringstream lines(json);
  std::string line;
  while (std::getline(lines, line))
    if (line.find(mark) != std::string::npos && line.find("NEGOTIATE_ALLREDUCE") != std::string::npos)
      return std::stoll(line.substr(line.find("\"ts\":") + 5));
  return -1;
}

}  // namespace

TEST(TimelineMovesAnotherRanksEventsByItsClockOffset) {
  const char* dir = std::getenv("TEST_TMPDIR");  // Bazel's test directory; else /tmp
  const std::string path =
      std::string(dir ? dir : "/tmp") + "/tfring_test_timeline_offset." + std::to_string(getpid()) + ".json";
  Timeline rank0, rank1;
  EXPECT(rank0.Start(path, false, 0));
  EXPECT(rank1.Start("", false, 1));
  // Both record "at once"; rank 1's steady clock runs 5 s ahead of rank 0's.
  rank0.NegotiateStart("x", "ALLREDUCE");
  rank1.NegotiateStart("x", "ALLREDUCE");
  const long long skew_us = 5000000;
  rank0.WriteShipment(1, rank1.TakeShipment(1 << 20), skew_us);
  rank1.Stop();
  rank0.Stop();
  std::ifstream f(path);
  std::stringstream all;
  all << f.rdbuf();
  const long long t0 = TsOf(all.str(), 0), t1 = TsOf(all.str(), 1);
  EXPECT(t0 >= 0);
  // On rank 0's clock rank 1's event is 5 s earlier than its own stamp (within 1 s of scheduling noise).
  EXPECT(t1 <= t0 - skew_us + 1000000 && t1 >= t0 - skew_us - 1000000);
  std::remove(path.c_str());
}
