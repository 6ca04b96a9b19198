#include "staging.h"

#include <utility>

namespace tfring {
namespace {

class HostBuffer : public Tensor {
 public:
  HostBuffer(DataType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
    bytes_ = NumElements(shape_) * DataTypeSize(dtype);
  }
  Status Allocate(DeviceCopier& copier) { return copier.AllocateHost(bytes_ > 0 ? bytes_ : 1, &data_); }
  DataType dtype() const override { return dtype_; }
  Shape shape() const override { return shape_; }
  void* data() override { return data_.get(); }
  int64_t size_bytes() const override { return bytes_; }

 private:
  DataType dtype_;
  Shape shape_;
  int64_t bytes_;
  std::shared_ptr<char> data_;
};

// Outputs whose shape only negotiation decides (allgather, alltoall, reducescatter): host buffers during the
// collective, the framework's device outputs afterwards. Alltoall's received splits are host memory in every
// adapter (the NCCL path writes them from the host too): they go straight to the framework's context.
class StagingContext : public OpContext {
 public:
  StagingContext(std::shared_ptr<OpContext> device, DeviceCopier& copier, DataType dtype, int extra_index)
      : device_(std::move(device)), copier_(copier), dtype_(dtype), extra_index_(extra_index) {}
  Status AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) override {
    if (index == extra_index_) return device_->AllocateOutput(index, shape, out);
    auto host = std::make_shared<HostBuffer>(dtype_, shape);
    TFR_RETURN_IF_ERROR(host->Allocate(copier_));
    allocated.emplace_back(index, host);
    *out = host;
    return Status::OK();
  }
  std::vector<std::pair<int, std::shared_ptr<HostBuffer>>> allocated;

 private:
  std::shared_ptr<OpContext> device_;
  DeviceCopier& copier_;
  DataType dtype_;
  int extra_index_;
};

struct Staged {
  TensorEntry host;                     // the entry as the host backend sees it
  std::shared_ptr<HostBuffer> output;   // host twin of a preallocated device output
  std::shared_ptr<StagingContext> ctx;  // outputs allocated during the collective
};
using StagedList = std::vector<Staged>;

// A copy may still be queued or running past its deadline: its host buffers must never be freed.
void Keep(const std::shared_ptr<StagedList>& staged) { new std::shared_ptr<StagedList>(staged); }

// Queues the copies of every output back to the device (allocating the framework's outputs where negotiation
// decided their shape). Returns whether any copy was queued through `queued`.
Status CopyBack(const std::vector<TensorEntry*>& entries, StagedList& staged, DeviceCopier& copier, bool* queued) {
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    Staged& s = staged[i];
    if (!e) continue;
    if (s.output && s.output->size_bytes() > 0) {
      TFR_RETURN_IF_ERROR(copier.ToDevice(*e, e->output->data(), s.output->data(), s.output->size_bytes()));
      *queued = true;
    }
    if (!s.ctx) continue;
    for (auto& a : s.ctx->allocated) {
      std::shared_ptr<Tensor> device;
      TFR_RETURN_IF_ERROR(e->context->AllocateOutput(a.first, a.second->shape(), &device));
      if (a.first == e->output_index) e->output = device;
      if (a.second->size_bytes() == 0) continue;
      TFR_RETURN_IF_ERROR(copier.ToDevice(*e, device->data(), a.second->data(), a.second->size_bytes()));
      *queued = true;
    }
  }
  return Status::OK();
}

}  // namespace

bool SharesDevice(const std::vector<int32_t>& devices, const std::vector<int>& host_of) {
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = i + 1; j < devices.size(); ++j) {
      const bool same_host = i < host_of.size() && j < host_of.size() && host_of[i] == host_of[j];
      if (devices[i] == devices[j] && same_host) return true;
    }
  return false;
}

Status PerformStaged(const Response& response, const std::vector<TensorEntry*>& entries, Backend& host,
                     DeviceCopier& copier, double timeout_seconds, double now) {
  const double deadline = timeout_seconds > 0 ? now + timeout_seconds : 1e300;
  auto staged = std::make_shared<StagedList>(entries.size());
  std::vector<TensorEntry*> host_entries(entries.size(), nullptr);
  for (size_t i = 0; i < entries.size(); ++i) {
    TensorEntry* e = entries[i];
    if (!e) continue;
    Staged& s = (*staged)[i];
    s.host = *e;
    s.host.request.device = -1;
    s.host.gpu_stream = nullptr;
    s.host.ready_event = nullptr;
    s.host.callback = nullptr;  // the runtime completes the framework's entry
    if (e->input) {
      auto in = std::make_shared<HostBuffer>(e->input->dtype(), e->input->shape());
      s.host.input = in;
      Status st = in->Allocate(copier);
      if (st.ok() && in->size_bytes() > 0)
        st = copier.ToHost(*e, in->data(), e->input->data(), in->size_bytes(), deadline);
      if (!st.ok()) {
        Keep(staged);
        return st;
      }
    }
    if (e->output) {
      s.output = std::make_shared<HostBuffer>(e->output->dtype(), e->output->shape());
      TFR_RETURN_IF_ERROR(s.output->Allocate(copier));
      s.host.output = s.output;
    }
    if (e->context) {
      s.ctx = std::make_shared<StagingContext>(e->context, copier, e->request.dtype, e->extra_output_index);
      s.host.context = s.ctx;
    }
    host_entries[i] = &s.host;
  }
  Response on_host = response;
  on_host.devices.clear();
  TFR_RETURN_IF_ERROR(host.Execute(on_host, host_entries));
  bool queued = false;
  Status st = CopyBack(entries, *staged, copier, &queued);
  // Queued copies read the host buffers: wait for them even when a later step failed.
  Status done = queued ? copier.Finish(deadline) : Status::OK();
  if (!done.ok()) Keep(staged);
  return st.ok() ? done : st;
}

}  // namespace tfring
