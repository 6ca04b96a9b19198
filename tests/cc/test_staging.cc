// Host staging of GPU tensors (ops/staging.h) on a device made of host memory with asynchronous streams: inputs
// are read only after the framework's queued producers ran, results land after the work the framework still had
// queued on a new output's memory, outputs whose shape negotiation decides are allocated through the framework's
// context, and a copy past its deadline fails the op instead of blocking.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "../../tfring/cc/common/ops/staging.h"
#include "check.h"

using namespace tfring;

namespace {

double Clock() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A stream: tasks run in order on their own thread, as a GPU runs what a stream queued.
class Stream {
 public:
  Stream() : thread_([this] { Run(); }) {}
  ~Stream() {
    Enqueue(nullptr);
    thread_.join();
  }
  long Enqueue(std::function<void()> task) {  // returns the task's ticket
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    cv_.notify_all();
    return ++queued_;
  }
  long queued() {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_;
  }
  bool WaitFor(long ticket, double deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    while (done_ < ticket) {
      if (Clock() > deadline) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !tasks_.empty(); });
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      if (!task) return;
      task();
      std::lock_guard<std::mutex> lock(mu_);
      ++done_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  long queued_ = 0, done_ = 0;
  std::thread thread_;
};

// The device side of staging over Stream: e.gpu_stream points to the framework's Stream.
class StreamCopier : public DeviceCopier {
 public:
  Status AllocateHost(int64_t bytes, std::shared_ptr<char>* out) override {
    out->reset(new char[bytes], std::default_delete<char[]>());
    return Status::OK();
  }
  Status ToHost(const TensorEntry& e, void* dst, const void* src, int64_t bytes, double deadline) override {
    auto* framework = static_cast<Stream*>(e.gpu_stream);
    if (!framework->WaitFor(framework->queued(), deadline)) return Status::Aborted("input not produced in time");
    std::memcpy(dst, src, bytes);
    return Status::OK();
  }
  Status ToDevice(const TensorEntry& e, void* dst, const void* src, int64_t bytes) override {
    auto* framework = static_cast<Stream*>(e.gpu_stream);
    const long after = framework->queued();
    last_ = own_.Enqueue([=] {
      framework->WaitFor(after, 1e300);
      std::memcpy(dst, src, bytes);
    });
    return Status::OK();
  }
  Status Finish(double deadline) override {
    return own_.WaitFor(last_, deadline) ? Status::OK() : Status::Aborted("copy back not done in time");
  }

 private:
  Stream own_;
  long last_ = 0;
};

class Buffer : public Tensor {
 public:
  Buffer(Shape shape, float fill) : shape_(shape), data_(NumElements(shape), fill) {}
  DataType dtype() const override { return DataType::FLOAT32; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_.data(); }
  int64_t size_bytes() const override { return data_.size() * sizeof(float); }
  std::vector<float>& values() { return data_; }

 private:
  Shape shape_;
  std::vector<float> data_;
};

// The framework's context: allocates "device" outputs and counts the calls.
class Context : public OpContext {
 public:
  Status AllocateOutput(int, const Shape& shape, std::shared_ptr<Tensor>* out) override {
    last = std::make_shared<Buffer>(shape, -1.0f);
    ++calls;
    *out = last;
    return Status::OK();
  }
  std::shared_ptr<Buffer> last;
  int calls = 0;
};

class NoTransport : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllreduceBitAnd(std::vector<uint64_t>*) override { return Status::OK(); }
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override {
    *all = {mine};
    return Status::OK();
  }
  Status BroadcastFromRoot(std::string*) override { return Status::OK(); }
};

// One rank's host backend: allreduce (sum of one) copies input to output; allgather allocates its output first.
class OneRank : public Backend {
 public:
  Transport& transport() override { return transport_; }
  Topology topology() const override { return Topology(); }
  Status Execute(const Response& r, const std::vector<TensorEntry*>& entries) override {
    saw_devices = !r.devices.empty();
    for (TensorEntry* e : entries) {
      if (e->request.device != -1 || e->gpu_stream) return Status::Unknown("a host entry kept device fields");
      if (r.op == OpType::ALLGATHER) TFR_RETURN_IF_ERROR(e->context->AllocateOutput(0, e->input->shape(), &e->output));
      std::memcpy(e->output->data(), e->input->data(), e->input->size_bytes());
    }
    return Status::OK();
  }
  void Finalize() override {}
  void SetTimeline(Timeline*) override {}
  void SetHierarchical(int) override {}
  Status CreateSubset(const std::vector<int>&, std::unique_ptr<Backend>*) override { return Status::Unknown("unused"); }
  bool saw_devices = false;

 private:
  NoTransport transport_;
};

Response GpuResponse(OpType op) {
  Response r;
  r.op = op;
  r.names = {"t"};
  r.devices = {0};
  return r;
}

TensorEntry Entry(Stream* framework, std::shared_ptr<Buffer> in, std::shared_ptr<Buffer> out) {
  TensorEntry e;
  e.request.name = "t";
  e.request.device = 0;
  e.request.dtype = DataType::FLOAT32;
  e.gpu_stream = framework;
  e.input = in;
  e.output = out;
  return e;
}

}  // namespace

TEST(StagingReadsTheInputOnlyAfterTheFrameworksQueuedProducer) {
  Stream framework;
  auto in = std::make_shared<Buffer>(Shape{1000}, 0.0f), out = std::make_shared<Buffer>(Shape{1000}, 0.0f);
  framework.Enqueue([in] {  // a slow kernel writes the input after the op was enqueued on the host
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (float& v : in->values()) v = 7.0f;
  });
  TensorEntry e = Entry(&framework, in, out);
  StreamCopier copier;
  OneRank host;
  EXPECT(PerformStaged(GpuResponse(OpType::ALLREDUCE), {&e}, host, copier, 5.0, Clock()).ok());
  EXPECT(!host.saw_devices);  // the host backend gets a CPU response
  EXPECT_EQ(out->values()[0], 7.0f);
  EXPECT_EQ(out->values()[999], 7.0f);
}

TEST(StagedResultLandsAfterWorkStillQueuedOnTheOutput) {
  Stream framework;
  auto in = std::make_shared<Buffer>(Shape{64}, 3.0f), out = std::make_shared<Buffer>(Shape{64}, 0.0f);
  TensorEntry e = Entry(&framework, in, out);
  StreamCopier copier;
  OneRank host;
  // The output's memory is still in use by earlier framework work (a caching allocator handed it out again).
  // The result must be written after it, not overwritten by it. The delay comes after the copy to the host.
  struct Delayed : StreamCopier {
    Stream* framework;
    std::shared_ptr<Buffer> out;
    Status ToDevice(const TensorEntry& e, void* dst, const void* src, int64_t bytes) override {
      framework->Enqueue([o = out] {
        std::this_thread::sleep_for(std::chrono::milliseconds(80));
        for (float& v : o->values()) v = 99.0f;
      });
      return StreamCopier::ToDevice(e, dst, src, bytes);
    }
  } delayed;
  delayed.framework = &framework;
  delayed.out = out;
  EXPECT(PerformStaged(GpuResponse(OpType::ALLREDUCE), {&e}, host, delayed, 5.0, Clock()).ok());
  EXPECT_EQ(out->values()[0], 3.0f);
  EXPECT_EQ(out->values()[63], 3.0f);
}

TEST(StagedAllgatherAllocatesTheFrameworksOutputAfterTheHostCollective) {
  Stream framework;
  auto in = std::make_shared<Buffer>(Shape{3, 2}, 5.0f);
  TensorEntry e = Entry(&framework, in, nullptr);
  auto ctx = std::make_shared<Context>();
  e.context = ctx;
  StreamCopier copier;
  OneRank host;
  EXPECT(PerformStaged(GpuResponse(OpType::ALLGATHER), {&e}, host, copier, 5.0, Clock()).ok());
  EXPECT_EQ(ctx->calls, 1);
  EXPECT(ctx->last && e.output == ctx->last);
  EXPECT((ctx->last->shape() == Shape{3, 2}));
  EXPECT_EQ(ctx->last->values()[5], 5.0f);
}

TEST(StagingPastItsDeadlineFailsTheOpInsteadOfBlocking) {
  Stream framework;
  auto in = std::make_shared<Buffer>(Shape{4}, 0.0f), out = std::make_shared<Buffer>(Shape{4}, 0.0f);
  framework.Enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); });
  TensorEntry e = Entry(&framework, in, out);
  StreamCopier copier;
  OneRank host;
  const double start = Clock();
  Status s = PerformStaged(GpuResponse(OpType::ALLREDUCE), {&e}, host, copier, 0.2, start);
  EXPECT(!s.ok());
  EXPECT(Clock() - start < 1.0);
}

TEST(RanksShareADeviceOnlyOnOneHost) {
  EXPECT(SharesDevice({0, 0}, {0, 0}));
  EXPECT(!SharesDevice({0, 0}, {0, 1}));  // GPU 0 of two hosts
  EXPECT(!SharesDevice({0, 1}, {0, 0}));
  EXPECT(SharesDevice({0, 1, 1}, {0, 1, 1}));
  EXPECT(!SharesDevice({0}, {0}));
}
