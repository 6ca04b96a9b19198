// The autotuner against a synthetic throughput model with a fake clock: it must visit the candidates, score
// them, end on the best setting and log every step.
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "../../tfring/cc/common/autotune.h"
#include "check.h"

using namespace tfring;

namespace {

// Peak at 4 MiB fusion and `best_cycle` ms; smooth elsewhere.
double Rate(const TunedParams& p, double best_cycle = 2) {
  const double f = std::log2(p.fusion_threshold_bytes / double(1 << 20));
  return 1e9 / (1 + std::pow(f - 2, 2) * 0.1 + std::pow(p.cycle_time_ms - best_cycle, 2) * 0.05);
}

}  // namespace

TEST(AutotunerFindsTheBestSettingAndLogsIt) {
  AutotuneOptions o;
  o.sample_seconds = 0.1;
  char path[] = "/tmp/tfring_autotune_test_XXXXXX";  // unique: parallel runs never share the log
  const int fd = mkstemp(path);
  EXPECT(fd >= 0);
  close(fd);
  o.log_path = path;
  Autotuner t({8 << 20, 1.0}, o);
  TunedParams in_force{8 << 20, 1.0};
  double now = 0;
  int proposals = 0;
  for (int step = 0; step < 100000 && !t.done(); ++step) {
    TunedParams p;
    if (t.TakeProposal(&p)) in_force = p, ++proposals;
    now += 0.01;
    t.Record(static_cast<int64_t>(Rate(in_force) * 0.01), now);
  }
  TunedParams p;
  if (t.TakeProposal(&p)) in_force = p;
  EXPECT(t.done());
  EXPECT_EQ(t.best().fusion_threshold_bytes, 4 << 20);
  EXPECT_EQ(t.best().cycle_time_ms, 2.0);
  EXPECT(in_force == t.best());  // the final proposal puts the best setting in force
  EXPECT_EQ(proposals, 7 + 3);   // 7 thresholds, then 3 new cycle times (1 ms was measured already)
  std::ifstream log(o.log_path);
  std::stringstream all;
  all << log.rdbuf();
  const std::string text = all.str();
  EXPECT(text.rfind("event,fusion_threshold_bytes,cycle_time_ms,bytes_per_second,hierarchical\n", 0) == 0);
  EXPECT(text.find("best,4194304,2,") != std::string::npos);
  EXPECT(text.find("warmup,") != std::string::npos && text.find("sample,") != std::string::npos);
  std::remove(path);
}

TEST(AutotunerIgnoresIdleTime) {
  AutotuneOptions o;
  o.sample_seconds = 0.1;
  o.warmup_samples = 0;
  o.samples_per_candidate = 1;
  Autotuner t({8 << 20, 1.0}, o);
  TunedParams p;
  EXPECT(t.TakeProposal(&p));
  double now = 0;
  for (int i = 0; i < 1000; ++i) t.Record(0, now += 0.01);  // a long idle stretch scores nothing
  EXPECT(!t.TakeProposal(&p));
  for (int i = 0; i < 12; ++i) t.Record(1000, now += 0.01);
  EXPECT(t.TakeProposal(&p));  // one sample of activity finished the first candidate
  EXPECT_EQ(p.fusion_threshold_bytes, 2 << 20);
}

TEST(AutotunerNeverRemeasuresTheStartingCycleTime) {
  // The first cycle candidate (0.5 ms) is the best: 1 ms (the thresholds' cycle) must still not be re-measured.
  AutotuneOptions o;
  o.sample_seconds = 0.1;
  Autotuner t({8 << 20, 1.0}, o);
  TunedParams in_force{8 << 20, 1.0};
  std::vector<double> cycles_tried;
  double now = 0;
  for (int step = 0; step < 100000 && !t.done(); ++step) {
    TunedParams p;
    if (t.TakeProposal(&p)) {
      if (p.cycle_time_ms != in_force.cycle_time_ms) cycles_tried.push_back(p.cycle_time_ms);
      in_force = p;
    }
    now += 0.01;
    t.Record(static_cast<int64_t>(Rate(in_force, 0.5) * 0.01), now);
  }
  EXPECT(t.done());
  EXPECT((cycles_tried == std::vector<double>{0.5, 2, 5}));
  EXPECT_EQ(t.best().cycle_time_ms, 0.5);
  EXPECT_EQ(t.best().fusion_threshold_bytes, 4 << 20);
}

// Runs a tuner with hierarchical allreduce offered against Rate() times `hier_gain` when bit 0 is set; returns
// the best setting and counts the proposals.
TunedParams TuneWithHierarchical(double hier_gain, int start_bits, int* proposals) {
  AutotuneOptions o;
  o.sample_seconds = 0.1;
  o.tune_hierarchical = true;
  Autotuner t({8 << 20, 1.0, start_bits}, o);
  TunedParams in_force{8 << 20, 1.0, start_bits};
  double now = 0;
  *proposals = 0;
  for (int step = 0; step < 100000 && !t.done(); ++step) {
    TunedParams p;
    if (t.TakeProposal(&p)) in_force = p, ++*proposals;
    now += 0.01;
    t.Record(static_cast<int64_t>(Rate(in_force) * (in_force.hierarchical & 1 ? hier_gain : 1) * 0.01), now);
  }
  TunedParams p;
  if (t.TakeProposal(&p)) in_force = p;
  EXPECT(t.done());
  EXPECT(in_force == t.best());
  return t.best();
}

TEST(AutotunerChoosesHierarchicalAllreduceWhenItIsFaster) {
  int proposals = 0;
  TunedParams best = TuneWithHierarchical(1.5, 2, &proposals);
  EXPECT_EQ(best.hierarchical, 3);  // bit 0 switched on, the allgather bit carried through
  EXPECT_EQ(best.fusion_threshold_bytes, 4 << 20);
  EXPECT_EQ(best.cycle_time_ms, 2.0);
  EXPECT_EQ(proposals, 7 + 3 + 1);  // thresholds, cycle times, the other allreduce path (then the best)
  best = TuneWithHierarchical(0.5, 1, &proposals);
  EXPECT_EQ(best.hierarchical, 0);  // started on, measured slower: switched off
  best = TuneWithHierarchical(0.9, 0, &proposals);
  EXPECT_EQ(best.hierarchical, 0);
}

TEST(AutotunerLeavesHierarchicalAloneWhenNotOffered) {
  AutotuneOptions o;
  o.sample_seconds = 0.1;
  Autotuner t({8 << 20, 1.0, 1}, o);
  double now = 0;
  TunedParams in_force{8 << 20, 1.0, 1};
  for (int step = 0; step < 100000 && !t.done(); ++step) {
    TunedParams p;
    if (t.TakeProposal(&p)) {
      EXPECT_EQ(p.hierarchical, 1);  // every proposal carries the starting value
      in_force = p;
    }
    now += 0.01;
    t.Record(static_cast<int64_t>(Rate(in_force) * 0.01), now);
  }
  EXPECT(t.done());
  EXPECT_EQ(t.best().hierarchical, 1);
}
