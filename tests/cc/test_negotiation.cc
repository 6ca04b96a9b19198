// Negotiation protocol with ranks as threads: ordering, readiness, validation, cache fast path, join.
#include <thread>

#include "../../tfring/cc/common/controller.h"
#include "check.h"
#include "thread_transport.h"

using namespace tfring;

namespace {

TensorEntry Entry(const std::string& name, Shape shape, OpType op = OpType::ALLREDUCE) {
  TensorEntry e;
  e.request.name = name;
  e.request.op = op;
  e.request.shape = shape;
  e.callback = [](const Status&) {};
  return e;
}

using Submit = std::function<void(int rank, int cycle, TensorQueue& q)>;
struct Run {
  std::vector<std::vector<ResponseList>> lists;  // [rank][cycle]
  std::vector<uint64_t> full_rounds;
};

// Runs `cycles` negotiation cycles on n ranks; after each cycle each rank takes (executes) its entries.
using ShutdownAt = std::function<bool(int rank, int cycle)>;
using ControllerHook = std::function<void(int rank, int cycle, Controller& c)>;
Run RunCycles(int n, int cycles, const Submit& submit, int64_t cache_capacity = 16, StallOptions stall = {},
              ShutdownAt shutdown = nullptr, ControllerHook hook = nullptr) {
  Hub hub(n);
  Run run;
  run.lists.assign(n, std::vector<ResponseList>(cycles));
  run.full_rounds.assign(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ThreadTransport t(hub, r);
      TensorQueue q;
      ControllerOptions options;
      options.cache_capacity = cache_capacity;
      options.stall = stall;
      Controller c(t, q, options);
      for (int cyc = 0; cyc < cycles; ++cyc) {
        submit(r, cyc, q);
        if (hook) hook(r, cyc, c);
        ResponseList& out = run.lists[r][cyc];
        Status s = c.ComputeResponseList(shutdown && shutdown(r, cyc), &out);
        if (!s.ok()) {  // no scenario here expects a failed cycle: a failure fails the test
          std::fprintf(stderr, "cycle failed: %s\n", s.message().c_str());
          ++Failures();
        }
        for (auto& resp : out.responses)
          for (auto& name : resp.names) {
            TensorEntry e;
            q.Take(name, &e);
          }
      }
      run.full_rounds[r] = c.full_rounds();
    });
  }
  for (auto& th : threads) th.join();
  return run;
}

std::vector<std::string> Names(const ResponseList& l) {
  std::vector<std::string> out;
  for (auto& r : l.responses)
    for (auto& n : r.names) out.push_back(n);
  return out;
}

bool SameOnAllRanks(const Run& run, int cycle) {
  for (size_t r = 1; r < run.lists.size(); ++r)
    if (Encode(run.lists[r][cycle]) != Encode(run.lists[0][cycle])) return false;
  return true;
}

}  // namespace

TEST(DifferentSubmissionOrderSameDecisions) {
  auto run = RunCycles(3, 1, [](int r, int, TensorQueue& q) {
    std::vector<std::string> names = {"a", "b", "c"};
    if (r == 1) std::swap(names[0], names[2]);
    for (auto& n : names) q.Add({Entry(n, {4})});
  });
  EXPECT(SameOnAllRanks(run, 0));
  EXPECT_EQ(Names(run.lists[0][0]).size(), 3u);
}

TEST(WaitsUntilEveryRankIsReady) {
  auto run = RunCycles(2, 4, [](int r, int cyc, TensorQueue& q) {
    if ((r == 0 && cyc == 0) || (r == 1 && cyc == 2)) q.Add({Entry("x", {2})});
  });
  for (int cyc = 0; cyc < 4; ++cyc) EXPECT(SameOnAllRanks(run, cyc));
  EXPECT(run.lists[0][0].responses.empty());
  EXPECT(run.lists[0][1].responses.empty());
  EXPECT_EQ(Names(run.lists[0][2]), std::vector<std::string>{"x"});
}

TEST(MismatchIsAnErrorOnEveryRankAndRuntimeContinues) {
  auto run = RunCycles(2, 2, [](int r, int cyc, TensorQueue& q) {
    if (cyc == 0) q.Add({Entry("w", {r == 0 ? 2 : 3})});
    if (cyc == 1) q.Add({Entry("v", {5})});
  });
  const Response& e = run.lists[1][0].responses.at(0);
  EXPECT(SameOnAllRanks(run, 0));
  EXPECT_EQ(e.kind, Response::ERROR);
  EXPECT(e.error.find("'w'") != std::string::npos);
  EXPECT(e.error.find("rank 0: [2]") != std::string::npos);
  EXPECT(e.error.find("rank 1: [3]") != std::string::npos);
  EXPECT_EQ(run.lists[1][1].responses.at(0).kind, Response::OK);
}

TEST(MismatchedCollectiveAndRoot) {
  auto run = RunCycles(2, 2, [](int r, int cyc, TensorQueue& q) {
    if (cyc == 0) q.Add({Entry("k", {2}, r == 0 ? OpType::ALLREDUCE : OpType::ALLGATHER)});
    if (cyc == 1) {
      TensorEntry e = Entry("b", {2}, OpType::BROADCAST);
      e.request.root_rank = r;
      q.Add({e});
    }
  });
  EXPECT(run.lists[0][0].responses.at(0).error.find("collective") != std::string::npos);
  EXPECT(run.lists[1][1].responses.at(0).error.find("root_rank") != std::string::npos);
}

TEST(SteadyStateUsesCacheFastPath) {
  auto run = RunCycles(2, 5, [](int r, int, TensorQueue& q) {
    if (r == 0) {
      q.Add({Entry("a", {3})});
      q.Add({Entry("b", {1})});
    } else {
      q.Add({Entry("b", {1})});
      q.Add({Entry("a", {3})});
    }
  });
  for (int cyc = 0; cyc < 5; ++cyc) {
    EXPECT(SameOnAllRanks(run, cyc));
    EXPECT_EQ(Names(run.lists[0][cyc]).size(), 2u);
  }
  EXPECT_EQ(run.full_rounds[0], 1u);  // only the first cycle negotiated in full
  EXPECT_EQ(run.full_rounds[1], 1u);
}

TEST(ChangedParametersInvalidateTheCache) {
  auto run = RunCycles(2, 3, [](int r, int cyc, TensorQueue& q) {
    Shape s = {2};
    if (cyc == 1 && r == 0) s = {7};  // one rank changes: mismatch error on both
    if (cyc == 2) s = {7};            // both change: valid again
    q.Add({Entry("g", s)});
  });
  for (int cyc = 0; cyc < 3; ++cyc) EXPECT(SameOnAllRanks(run, cyc));
  EXPECT_EQ(run.lists[0][1].responses.at(0).kind, Response::ERROR);
  EXPECT_EQ(run.lists[0][2].responses.at(0).kind, Response::OK);
  EXPECT_EQ(run.lists[0][2].responses.at(0).sizes.at(0), 7);
}

TEST(CacheEvictionStaysConsistent) {
  // Capacity 2 with 3 names cycling: evictions must not desynchronize ranks.
  auto run = RunCycles(
      3, 6,
      [](int r, int cyc, TensorQueue& q) {
        const char* names[] = {"p", "q", "s"};
        for (int i = 0; i < 3; ++i) q.Add({Entry(names[(i + r + cyc) % 3], {1})});
      },
      2);
  for (int cyc = 0; cyc < 6; ++cyc) {
    EXPECT(SameOnAllRanks(run, cyc));
    EXPECT_EQ(Names(run.lists[0][cyc]).size(), 3u);
  }
}

TEST(JoinedRanksContributeAndLastJoinerIsReported) {
  auto run = RunCycles(2, 3, [](int r, int cyc, TensorQueue& q) {
    if (cyc == 0) q.Add({Entry("warm", {2})});  // cached, then bypassed while a rank is joined
    if (cyc == 1 && r == 1) q.Add({Entry("__tfring_join__", {}, OpType::JOIN)});
    if (cyc == 1 && r == 0) q.Add({Entry("warm", {2})});
    if (cyc == 2 && r == 0) q.Add({Entry("__tfring_join__", {}, OpType::JOIN)});
  });
  for (int cyc = 0; cyc < 3; ++cyc) EXPECT(SameOnAllRanks(run, cyc));
  const Response& ar = run.lists[0][1].responses.at(0);
  EXPECT_EQ(ar.names[0], "warm");
  EXPECT_EQ(ar.joined, 1);
  const Response& j = run.lists[1][2].responses.at(0);
  EXPECT(j.op == OpType::JOIN);
  EXPECT_EQ(j.last_joined_rank, 0);
}

TEST(DuplicateNameInFlightRejectedLocally) {
  TensorQueue q;
  EXPECT(q.Add({Entry("d", {1})}).ok());
  Status s = q.Add({Entry("d", {1})});
  EXPECT(!s.ok());
  EXPECT(s.message().find("'d'") != std::string::npos);
}

thread_local double fake_now = 0;  // each rank thread's clock: one second per cycle

TEST(StallInspectorWarnsThenFailsOnEveryRank) {
  // 'late': only rank 0 ever submits it. 'steady': cached at cycle 0, then only rank 0 submits it again, so
  // the cache hit must be demoted to a full round where the inspector sees it.
  auto run = RunCycles(
      2, 8,
      [](int r, int cyc, TensorQueue& q) {
        fake_now = cyc;
        if (cyc == 0 || (cyc == 1 && r == 0)) q.Add({Entry("steady", {1})});
        if (cyc == 0 && r == 0) q.Add({Entry("late", {1})});
      },
      16, StallOptions{2.0, 5.0, [] { return fake_now; }});
  for (int cyc = 0; cyc < 8; ++cyc) EXPECT(SameOnAllRanks(run, cyc));
  EXPECT_EQ(run.lists[1][2].stall_report.find("tensor 'late' (allreduce) waited 2 s: submitted by ranks [0], "
                                              "missing ranks [1]") != std::string::npos,
            true);
  auto error_for = [&](int cyc, const std::string& name) {
    for (auto& resp : run.lists[1][cyc].responses)
      if (resp.names[0] == name && resp.kind == Response::ERROR) return resp.error;
    return std::string();
  };
  EXPECT(error_for(4, "late").empty());
  EXPECT(error_for(5, "late").find("missing ranks [1]") != std::string::npos);
  EXPECT(error_for(5, "late").find("TFRING_STALL_SHUTDOWN_TIME_SECONDS=5") != std::string::npos);
  EXPECT(error_for(7, "steady").find("tensor 'steady'") != std::string::npos);
}

TEST(ShutdownReachesEveryRankNamingWhoAskedEvenOnTheFastPath) {
  auto run = RunCycles(
      3, 3, [](int, int, TensorQueue& q) { q.Add({Entry("w", {1})}); }, 16, {},
      [](int r, int cyc) { return r == 2 && cyc == 2; });
  EXPECT(!run.lists[0][1].shutdown);
  EXPECT_EQ(run.full_rounds[0], 2u);  // cycle 0 (new name) and cycle 2 (shutdown); cycle 1 used the cache
  for (int r = 0; r < 3; ++r) {
    EXPECT(run.lists[r][2].shutdown);
    EXPECT_EQ(run.lists[r][2].shutdown_rank, 2);
    EXPECT_EQ(Names(run.lists[r][2]).size(), 1u);  // the cycle's work still completes
  }
}

TEST(DemotedCacheHitIsExecutedExactlyOnce) {
  // Both ranks hold a cache hit for 'h' long enough that one demotes it while the other still sets its ready bit:
  // the name must run once, through the full round, never also through the stale bit.
  auto run = RunCycles(
      2, 4,
      [](int r, int cyc, TensorQueue& q) {
        fake_now = cyc == 2 && r == 0 ? 10.0 : cyc;  // rank 0's clock jumps: its pending hit looks old
        if (cyc == 0 || (cyc == 1 && r == 0) || (cyc == 2 && r == 1)) q.Add({Entry("h", {2})});
      },
      16, StallOptions{60.0, 0.0, [] { return fake_now; }});
  int executed = 0;
  for (int cyc = 0; cyc < 4; ++cyc) {
    EXPECT(SameOnAllRanks(run, cyc));
    for (auto& name : Names(run.lists[0][cyc])) executed += name == "h";
  }
  EXPECT_EQ(executed, 2);  // cycle 0, and once more for the second submission
}

TEST(AutotuneParametersReachEveryRankInTheSameCycle) {
  // Steady state on the cache fast path; rank 0 proposes at cycle 3: every rank must see it at cycle 3 only.
  Run run = RunCycles(
      3, 6,
      [](int, int, TensorQueue& q) {
        std::vector<TensorEntry> v;
        v.push_back(Entry("g", {4}));
        q.Add(v);
      },
      16, {}, nullptr,
      [](int rank, int cyc, Controller& c) {
        if (rank == 0 && cyc == 3) c.ProposeParameters({2 << 20, 5.0});
      });
  for (int r = 0; r < 3; ++r)
    for (int cyc = 0; cyc < 6; ++cyc) {
      const ResponseList& l = run.lists[r][cyc];
      EXPECT_EQ(l.tuned_fusion_threshold, cyc == 3 ? (2 << 20) : -1);
      EXPECT_EQ(l.tuned_cycle_time_ms, cyc == 3 ? 5.0 : -1);
      EXPECT_EQ(l.responses.size(), 1u);  // the collective itself still runs every cycle
    }
}

// The background loop starts a cycle at once for a single new submission (no cycle floor after a cycle that left
// nothing waiting) and spaces cycles while submitted work waits for other ranks or a burst is arriving.
TEST(OneNewSubmissionTellsALoneCollectiveFromWaitingWorkAndBursts) {
  TensorQueue q;
  EXPECT(!q.OneNewSubmission());  // nothing outstanding
  q.Add({Entry("a", {2})});
  EXPECT(q.OneNewSubmission());
  q.PopNewRequests();  // negotiated once, still outstanding: waiting for the other ranks
  EXPECT(!q.OneNewSubmission());
  q.Add({Entry("b", {2})});
  EXPECT(!q.OneNewSubmission());  // "a" still waits
  TensorEntry taken;
  EXPECT(q.Take("a", &taken));
  q.PopNewRequests();
  EXPECT(q.Take("b", &taken));
  EXPECT(!q.HasEntries() && !q.OneNewSubmission());
  q.Add({Entry("c", {2}), Entry("d", {3})});  // a grouped op is one submission
  EXPECT(q.OneNewSubmission());
  q.Add({Entry("e", {2})});  // a second one: a burst, keep the spacing
  EXPECT(!q.OneNewSubmission());
}
