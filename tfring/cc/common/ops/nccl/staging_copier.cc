// The CUDA side of host staging (ops/staging.h): one copy stream per device, waits ordered by events, and no
// CUDA call that blocks the background thread without a deadline (events are polled).
#include <cuda_runtime.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../checks.h"
#include "../../clock.h"
#include "../gpu_backend.h"
#include "../staging.h"

namespace tfring {
namespace {

double Now() { return SteadySeconds(); }

Status Poll(const std::function<cudaError_t()>& query, double deadline, const std::string& what) {
  for (int spins = 0;; ++spins) {
    const cudaError_t e = query();
    if (e == cudaSuccess) return Status::OK();
    if (e != cudaErrorNotReady) return Status::Unknown("tfring: " + what + ": CUDA: " + cudaGetErrorString(e));
    if (Now() > deadline)
      return Status::Aborted("tfring: " + what + " did not finish within TFRING_GPU_TIMEOUT_SECONDS");
    if (spins < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Pinned host blocks by power-of-two size (from 64 KiB), reused across ops: pinned copies run at the bus's speed
// and reused pages do not fault. At most kMaxIdle bytes stay pinned while unused; the rest is freed.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  static constexpr int64_t kMinBlock = int64_t{64} << 10, kMaxIdle = int64_t{1} << 30;
  ~PinnedPool() {
    for (auto& kv : idle_)
      for (void* p : kv.second) cudaFreeHost(p);
  }
  Status Get(int64_t bytes, std::shared_ptr<char>* out) {
    int64_t block = kMinBlock;
    while (block < bytes) block <<= 1;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free = idle_[block];
      if (!free.empty()) {
        p = free.back();
        free.pop_back();
        idle_bytes_ -= block;
      }
    }
    if (!p) TFR_CHECK_CUDA(cudaHostAlloc(&p, block, cudaHostAllocPortable));
    auto self = shared_from_this();  // a block kept past a deadline may outlive the copier
    out->reset(static_cast<char*>(p), [self, block](char* q) { self->Put(q, block); });
    return Status::OK();
  }

 private:
  void Put(void* p, int64_t block) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (idle_bytes_ + block <= kMaxIdle) {
        idle_[block].push_back(p);
        idle_bytes_ += block;
        return;
      }
    }
    cudaFreeHost(p);
  }
  std::mutex mu_;
  std::map<int64_t, std::vector<void*>> idle_;
  int64_t idle_bytes_ = 0;
};

class CudaCopier : public DeviceCopier {
 public:
  Status AllocateHost(int64_t bytes, std::shared_ptr<char>* out) override { return pool_->Get(bytes, out); }

  ~CudaCopier() override {
    for (auto& kv : streams_) {
      cudaSetDevice(kv.first);
      cudaStreamDestroy(kv.second.stream);
      cudaEventDestroy(kv.second.order);
      cudaEventDestroy(kv.second.done);
    }
  }

  Status ToHost(const TensorEntry& e, void* dst, const void* src, int64_t bytes, double deadline) override {
    Stream* s;
    TFR_RETURN_IF_ERROR(Get(e.request.device, &s));
    const std::string what = "staging GPU tensor '" + e.request.name + "' through host memory";
    if (e.ready_event) {  // recorded on the framework's stream at enqueue, right after the input's producers
      auto ready = static_cast<cudaEvent_t>(e.ready_event.get());
      TFR_RETURN_IF_ERROR(Poll([ready] { return cudaEventQuery(ready); }, deadline, what + " (input not produced)"));
    }
    TFR_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream));
    TFR_CHECK_CUDA(cudaEventRecord(s->done, s->stream));
    cudaEvent_t done = s->done;
    return Poll([done] { return cudaEventQuery(done); }, deadline, what);
  }

  Status ToDevice(const TensorEntry& e, void* dst, const void* src, int64_t bytes) override {
    Stream* s;
    TFR_RETURN_IF_ERROR(Get(e.request.device, &s));
    if (e.gpu_stream) {  // a freshly allocated output may still be in use by work queued on the framework's stream
      TFR_CHECK_CUDA(cudaEventRecord(s->order, static_cast<cudaStream_t>(e.gpu_stream)));
      TFR_CHECK_CUDA(cudaStreamWaitEvent(s->stream, s->order, 0));
    }
    // cudaMemcpyDefault: outputs a framework keeps in host memory (TF's HostMemory) are copied as well.
    TFR_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s->stream));
    pending_.insert(e.request.device);
    return Status::OK();
  }

  Status Finish(double deadline) override {
    std::set<int> pending;
    pending.swap(pending_);
    for (int device : pending) {
      Stream* s;
      TFR_RETURN_IF_ERROR(Get(device, &s));
      TFR_CHECK_CUDA(cudaEventRecord(s->done, s->stream));
      cudaEvent_t done = s->done;
      TFR_RETURN_IF_ERROR(Poll([done] { return cudaEventQuery(done); }, deadline,
                               "copying staged results back to GPU " + std::to_string(device)));
    }
    return Status::OK();
  }

 private:
  struct Stream {
    cudaStream_t stream = nullptr;
    cudaEvent_t order = nullptr, done = nullptr;
  };

  // The device's copy stream, made current (the background thread only ever works on one device at a time).
  Status Get(int device, Stream** out) {
    TFR_CHECK_CUDA(cudaSetDevice(device));
    auto it = streams_.find(device);
    if (it == streams_.end()) {
      Stream s;
      TFR_CHECK_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
      TFR_CHECK_CUDA(cudaEventCreateWithFlags(&s.order, cudaEventDisableTiming));
      TFR_CHECK_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
      it = streams_.emplace(device, s).first;
    }
    *out = &it->second;
    return Status::OK();
  }

  std::shared_ptr<PinnedPool> pool_ = std::make_shared<PinnedPool>();
  std::map<int, Stream> streams_;
  std::set<int> pending_;  // devices with copies queued since the last Finish
};

}  // namespace

std::unique_ptr<DeviceCopier> CreateCudaCopier() { return std::unique_ptr<DeviceCopier>(new CudaCopier()); }

}  // namespace tfring
