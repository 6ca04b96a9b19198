// The monitor with ranks as threads: waiting time is the union of a rank's waiting intervals, and rank 0 names
// the rank that waited least (it arrived last) only when that persists beyond the threshold.
#include <chrono>
#include <thread>

#include "../../tfring/cc/common/monitor.h"
#include "check.h"
#include "thread_transport.h"

using namespace tfring;

namespace {

// Runs body(monitor, transport, rank) on n threads, the ranks; returns every rank's last summary.
std::vector<std::string> OnRanks(int n, const std::function<void(Monitor&, Transport&, int)>& body,
                                 MonitorOptions options = MonitorOptions()) {
  Hub hub(n);
  std::vector<std::string> summaries(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Monitor m;
      std::string error;
      ThreadTransport t(hub, r);
      m.Configure(options, r, n, nullptr, &error);
      body(m, t, r);
      summaries[r] = m.Summary();
    });
  for (auto& th : threads) th.join();
  return summaries;
}

// Runs `rounds` rounds on n threads; before each, rank r waits wait(r, round) seconds over `steps` marked steps.
std::vector<std::string> Rounds(int n, int rounds, int steps, const std::function<double(int, int)>& wait,
                                MonitorOptions options = MonitorOptions()) {
  return OnRanks(
      n,
      [&](Monitor& m, Transport& t, int r) {
        for (int k = 0; k < rounds; ++k) {
          double at = 1000.0 * k;  // steady-clock seconds of a made-up timeline: only differences matter
          for (int s = 0; s < steps; ++s, at += 1) {
            m.OnWait(at + 0.5 - wait(r, k), at + 0.5);
            m.OnExecuted({"g"}, OpType::ALLREDUCE, 4000, n, 0.001);
            m.MarkStep();
          }
          m.Round(t, false);
        }
      },
      options);
}

}  // namespace

TEST(MonitorWaitIsTheUnionOfIntervals) {
  Monitor m;
  std::string error;
  m.Configure(MonitorOptions(), 0, 1, nullptr, &error);
  m.OnWait(10.0, 10.5);  // 0.5 s
  m.OnWait(10.2, 10.7);  // overlaps: only 0.2 s more
  m.OnWait(11.0, 11.1);  // disjoint: 0.1 s
  Hub hub(1);
  ThreadTransport t(hub, 0);
  m.Round(t, false);
  const std::string s = m.Summary();
  EXPECT(s.find("\"wait_ms\":800.000") != std::string::npos);
}

TEST(MonitorNamesThePersistentLastRankOnEveryRank) {
  // Rank 2 arrives 50 ms late every step: the others wait 50 ms more than it does.
  auto s = Rounds(3, 4, 5, [](int r, int) { return r == 2 ? 0.001 : 0.051; });
  for (const auto& summary : s) {
    EXPECT(summary.find("\"straggler\":{\"rank\":2,\"waited_ms_per_step\":50.000") != std::string::npos);
    EXPECT_EQ(summary, s[0]);
  }
}

TEST(MonitorNamesNobodyBelowTheThresholdOrWhenTheLastRankChanges) {
  // 3 ms late (below the 5 ms floor): reported as the slowest, not named.
  auto small = Rounds(2, 4, 5, [](int r, int) { return r == 1 ? 0.0 : 0.003; });
  EXPECT(small[0].find("\"straggler\":null") != std::string::npos);
  EXPECT(small[0].find("\"slowest\":{\"rank\":1") != std::string::npos);
  // 50 ms late, but a different rank each round: not persistent.
  auto rotating = Rounds(2, 6, 5, [](int r, int k) { return r == k % 2 ? 0.0 : 0.05; });
  EXPECT(rotating[1].find("\"straggler\":null") != std::string::npos);
}

TEST(MonitorNamesAStragglerWhenRoundsHoldManySteps) {
  // Fast steps: 12 a round, more than half the 20-step evidence; the verdict still sees its 3 rounds.
  auto s = Rounds(2, 4, 12, [](int r, int) { return r == 1 ? 0.0 : 0.02; });
  EXPECT(s[0].find("\"straggler\":{\"rank\":1,\"waited_ms_per_step\":20.000") != std::string::npos);
}

TEST(MonitorLeavesTheFirstStepOutOfTheEvidence) {
  // Round 0 holds the first step: every rank waits 2 s for rank 0, which traced and compiled slowest. Then rank 1
  // straggles by 50 ms a step. Counted, the first round would make rank 0 the one that arrived last for 20 steps.
  auto s = Rounds(3, 4, 5, [](int r, int k) { return k == 0 ? (r == 0 ? 0.0 : 0.4) : (r == 1 ? 0.001 : 0.051); });
  for (const auto& summary : s)
    EXPECT(summary.find("\"straggler\":{\"rank\":1,\"waited_ms_per_step\":50.000") != std::string::npos);
}

TEST(MonitorLeavesOneRecompileRoundOutButNotASlowdownThatStays) {
  // Rank 1 straggles by 50 ms a step throughout; in round 4 rank 0 recompiles: the others wait 0.4 s a step for it
  // and the round's steps take 0.35 s, far over the median and the 0.2 s floor (room for a busy machine). Counted, it
  // would turn the verdict to nobody.
  const int n = 2;
  auto round = [n](Monitor& m, Transport& t, int r, int k, double late0, double sleep) {
    const double at = 1000.0 * k;
    for (int step = 0; step < 2; ++step) {
      m.OnWait(at + step + 0.5 - (r == 1 ? late0 : 0.051), at + step + 0.5);
      m.OnExecuted({"g"}, OpType::ALLREDUCE, 4000, n, 0.001);
      m.MarkStep();
    }
    if (sleep > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep));
    m.Round(t, false);
  };
  auto once = OnRanks(n, [&](Monitor& m, Transport& t, int r) {
    for (int k = 0; k < 8; ++k) round(m, t, r, k, k == 4 ? 0.4 : 0.001, k == 4 ? 0.7 : 0);
  });
  EXPECT(once[0].find("\"straggler\":{\"rank\":1,\"waited_ms_per_step\":50.000") != std::string::npos);
  // Rank 0 slow for good from round 4 on: judged from the round after the first long one (never two left out).
  auto stays = OnRanks(n, [&](Monitor& m, Transport& t, int r) {
    for (int k = 0; k < 8; ++k) round(m, t, r, k, k >= 4 ? 0.4 : 0.001, k >= 4 ? 0.7 : 0);
  });
  EXPECT(stays[0].find("\"straggler\":{\"rank\":0,") != std::string::npos);
}

TEST(MonitorSummaryStaysValidJsonWithoutSteps) {
  // Rounds without a step (a long step spanning rounds): no straggler yet, and no nan/inf in the JSON.
  auto s = Rounds(2, 3, 0, [](int, int) { return 0.0; });
  EXPECT(s[0].find("\"straggler\":null") != std::string::npos);
  EXPECT(s[0].find("nan") == std::string::npos && s[0].find("inf") == std::string::npos);
  EXPECT(s[0].find("\"step_ms\":null") != std::string::npos);
}

TEST(MonitorCountsTheWaitsOfRoundsWithoutAStep) {
  // Steps longer than a round: every other round ends inside a step. Rank 0 waits 40 ms for rank 1 in each round,
  // so 80 ms per step; a round without a step must add its waiting to the next step's, not be overwritten by it.
  const int n = 2;
  auto summaries = OnRanks(n, [](Monitor& m, Transport& t, int r) {
    for (int k = 0; k < 8; ++k) {
      const double at = 1000.0 * k;
      m.OnWait(at + 0.5 - (r == 0 ? 0.040 : 0.0), at + 0.5);
      if (k % 2 == 1) {  // (a round with a collective but no mark would count a step inferred from its names)
        m.OnExecuted({"g"}, OpType::ALLREDUCE, 4000, n, 0.001);
        m.MarkStep();
      }
      m.Round(t, false);
    }
  });
  EXPECT(summaries[0].find("\"slowest\":{\"rank\":1,\"waited_ms_per_step\":80.000") != std::string::npos);
}

TEST(MonitorBusBandwidthIsNcclTestsConvention) {
  // 4 ranks, in 10 ms of transfer: an allreduce of 10 MB moves 2(n-1)/n of it over each link (1.5 GB/s), a
  // broadcast of 10 MB all of it (1 GB/s), an allgather of 10 MB (n-1)/n (0.75 GB/s); the total is their sum over
  // the time of all three.
  const int n = 4;
  auto summaries = OnRanks(n, [](Monitor& m, Transport& t, int) {
    m.OnExecuted({"a"}, OpType::ALLREDUCE, 10000000, n, 0.01);
    m.Round(t, false);
    m.OnExecuted({"b"}, OpType::BROADCAST, 10000000, n, 0.01);
    m.Round(t, false);
    m.OnExecuted({"g"}, OpType::ALLGATHER, 10000000, n, 0.01);
    m.Round(t, false);
  });
  const std::string& s = summaries[0];
  EXPECT(s.find("\"busbw_gbps\":0.750") != std::string::npos);  // the last round: the allgather
  EXPECT(s.find("\"total\":{\"wait_s\":0.000,\"transfer_s\":0.030,\"bytes_reduced\":10000000,\"collectives\":3,"
                "\"busbw_gbps\":1.083") != std::string::npos);  // (15 + 10 + 7.5) MB / 30 ms
}
