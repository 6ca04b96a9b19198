// The GPU path's logic that needs no GPU: device agreement in negotiation, device-aware fusion and cache keys,
// fusion-buffer layout, reducescatter splits, and the completion queue's ordering, failure and deadline rules.
#include <atomic>

#include "../../tfring/cc/common/completion_queue.h"
#include "../../tfring/cc/common/coordinator.h"
#include "../../tfring/cc/common/fusion.h"
#include "../../tfring/cc/common/message.h"
#include "../../tfring/cc/common/ops/layout.h"
#include "check.h"

using namespace tfring;

static Request Req(int rank, int device) {
  Request r;
  r.rank = rank;
  r.name = "g";
  r.shape = {4};
  r.device = device;
  return r;
}

TEST(MixedHostAndGpuTensorIsAnErrorNamingRanks) {
  Request a = Req(0, 0), b = Req(1, -1);
  Response resp = BuildResponse("g", {&a, &b}, 0);
  EXPECT(resp.kind == Response::ERROR);
  EXPECT(resp.error.find("device") != std::string::npos);
  EXPECT(resp.error.find("rank 0: GPU") != std::string::npos);
  EXPECT(resp.error.find("rank 1: CPU") != std::string::npos);
}

TEST(GpuResponseCarriesEveryRanksDevice) {
  Request a = Req(0, 1), b = Req(1, 0);
  Response resp = BuildResponse("g", {&a, &b}, 0);
  EXPECT(resp.kind == Response::OK);
  EXPECT((resp.devices == std::vector<int32_t>{1, 0}));
  Request c = Req(0, -1), d = Req(1, -1);
  EXPECT(BuildResponse("g", {&c, &d}, 0).devices.empty());  // CPU collectives keep the MPI path
}

TEST(GpuCollectiveWithJoinedRankIsRefused) {
  Request a = Req(0, 0);
  Response resp = BuildResponse("g", {&a, nullptr}, 1);
  EXPECT(resp.kind == Response::ERROR);
  EXPECT(resp.error.find("join") != std::string::npos);
}

TEST(DeviceTravelsInMessagesAndCacheKeys) {
  RequestList l;
  l.requests = {Req(0, 3)};
  RequestList back;
  EXPECT(Decode(Encode(l), &back).ok());
  EXPECT_EQ(back.requests[0].device, 3);
  EXPECT(!SameParameters(Req(0, 3), Req(0, -1)));  // moving a tensor to another device misses the cache
  ResponseList rl;
  Response r;
  r.names = {"g"};
  r.devices = {2, 5};
  rl.responses = {r};
  ResponseList rback;
  EXPECT(Decode(Encode(rl), &rback).ok());
  EXPECT((rback.responses[0].devices == std::vector<int32_t>{2, 5}));
}

TEST(FusionNeverMixesHostAndDeviceMemory) {
  auto resp = [](const std::string& n, std::vector<int32_t> devices) {
    Response r;
    r.names = {n};
    r.sizes = {4};
    r.devices = devices;
    return r;
  };
  std::vector<Response> out = PlanFusion(
      {resp("cpu1", {}), resp("gpu1", {0, 0}), resp("cpu2", {}), resp("gpu2", {0, 0}), resp("gpu_other", {1, 1})},
      1 << 20);
  EXPECT_EQ(out.size(), 3u);
  EXPECT((out[0].names == std::vector<std::string>{"cpu1", "cpu2"}));
  EXPECT((out[1].names == std::vector<std::string>{"gpu1", "gpu2"}));
  EXPECT((out[2].names == std::vector<std::string>{"gpu_other"}));
}

TEST(LayoutArithmetic) {
  EXPECT((EvenRowCounts(7, 3) == std::vector<int64_t>{3, 2, 2}));
  EXPECT((EvenRowCounts(2, 3) == std::vector<int64_t>{1, 1, 0}));
  EXPECT((Offsets({3, 0, 2}) == std::vector<int64_t>{0, 3, 3}));
  FusionLayout l = PlanFusionLayout({3, 5, 1}, 4, 256);  // 64 floats per 256 bytes
  EXPECT((l.offsets == std::vector<int64_t>{0, 64, 128}));
  EXPECT_EQ(l.total, 129);
  FusionLayout d = PlanFusionLayout({1, 1}, 8, 256);
  EXPECT((d.offsets == std::vector<int64_t>{0, 32}));
  EXPECT(NcclCanReduce(DataType::FLOAT32) && NcclCanReduce(DataType::BFLOAT16) && NcclCanReduce(DataType::INT64));
  EXPECT(!NcclCanReduce(DataType::INT16) && !NcclCanReduce(DataType::BOOL) && !NcclCanReduce(DataType::UINT16));
}

namespace {

CompletionQueue::Item Work(const std::string& name, std::function<CompletionQueue::Probe(std::string*)> probe,
                           std::vector<std::string>* log) {
  CompletionQueue::Item item;
  item.names = {name};
  item.probe = std::move(probe);
  TensorEntry e;
  e.callback = [log, name](const Status& s) { log->push_back(name + (s.ok() ? ":ok" : ":" + s.message())); };
  item.entries.push_back(std::move(e));
  return item;
}

}  // namespace

TEST(CompletionQueueRunsCallbacksInOrderOnceDone) {
  std::vector<std::string> log;
  std::atomic<int> polls{0};
  {
    CompletionQueue q(10, nullptr);
    q.Push(
        Work("a", [&](std::string*) { return ++polls < 5 ? CompletionQueue::RUNNING : CompletionQueue::DONE; }, &log));
    q.Push(Work("b", [](std::string*) { return CompletionQueue::DONE; }, &log));
    q.Drain();
    EXPECT(!q.broken());
  }
  EXPECT((log == std::vector<std::string>{"a:ok", "b:ok"}));
  EXPECT(polls.load() >= 5);
}

TEST(CompletionQueueFailureAbortsAndFailsEverythingAfter) {
  std::vector<std::string> log;
  std::string aborted;
  CompletionQueue* self = nullptr;
  bool broken_before_abort = false;  // the backend must refuse new work before the communicators go away
  CompletionQueue q(10, [&](const std::string& why) {
    aborted = why;
    broken_before_abort = self && self->broken();
  });
  self = &q;
  std::atomic<bool> release{false};
  q.Push(Work(
      "bad",
      [&](std::string* err) {
        if (!release) return CompletionQueue::RUNNING;
        *err = "NCCL: unhandled system error";
        return CompletionQueue::FAILED;
      },
      &log));
  q.Push(Work("behind", [](std::string*) { return CompletionQueue::DONE; }, &log));
  release = true;
  q.Drain();
  EXPECT(q.broken());
  EXPECT(broken_before_abort);
  EXPECT(aborted.find("[bad]") != std::string::npos && aborted.find("unhandled system error") != std::string::npos);
  EXPECT_EQ(log.size(), 2u);
  EXPECT(log[0].find("bad:tfring: GPU collective on [bad] failed") == 0);
  EXPECT(log[1].find("behind:") == 0 && log[1].find(":ok") == std::string::npos);
  q.Push(Work("later", [](std::string*) { return CompletionQueue::DONE; }, &log));  // refused at once
  EXPECT_EQ(log.size(), 3u);
  EXPECT(log[2].find("later:") == 0 && log[2].find(":ok") == std::string::npos);
}

TEST(CompletionQueueDeadlineNamesTheTensors) {
  std::vector<std::string> log;
  bool aborted = false;
  CompletionQueue q(0.05, [&](const std::string&) { aborted = true; });
  q.Push(Work("stuck", [](std::string*) { return CompletionQueue::RUNNING; }, &log));
  q.Drain();
  EXPECT(aborted);
  EXPECT_EQ(log.size(), 1u);
  EXPECT(log[0].find("[stuck] did not finish within") != std::string::npos);
}
