#include "adapter.h"

#include "output_cache.h"

#include <stdexcept>

namespace tfring {
namespace torch_binding {

bool FromTorch(at::ScalarType in, DataType* out) {
  static const at::ScalarType kTypes[] = {
      at::kByte, at::kChar,  at::kUInt16, at::kShort, at::kInt,     at::kLong,
      at::kHalf, at::kFloat, at::kDouble, at::kBool,  at::kBFloat16};  // DataType's order
  return EnumOf(kTypes, in, out);
}

DataType TorchTensor::dtype() const {
  DataType d = DataType::UINT8;
  FromTorch(t_.scalar_type(), &d);  // entries are only built for supported dtypes
  return d;
}

Shape TorchTensor::shape() const {
  Shape s;
  for (int64_t d : t_.sizes()) s.push_back(d);
  return s;
}

StatusCallback OpState::MakeCallback(const std::shared_ptr<OpState>& self) {
  return [self](const Status& s) {
    {
      std::lock_guard<std::mutex> lock(self->mu);
      if (!s.ok() && self->status.ok()) self->status = s;
      // The background thread never runs as the enqueuing thread: a callback here means Enqueue refused the
      // entries (not initialized, not a member, duplicate name), which Python raises at the call, as Horovod.
      if (std::this_thread::get_id() == self->enqueuer) self->failed_at_enqueue = true;
      if (--self->remaining > 0) return;
      self->done = true;
    }
    self->cv.notify_all();
  };
}

Status TorchOpContext::AllocateOutput(int index, const Shape& shape, std::shared_ptr<Tensor>* out) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (index < 0 || index >= static_cast<int>(state_->out_options.size()))
    return Status::Unknown("tfring: output index " + std::to_string(index) + " out of range");
  at::Tensor t;
  try {
    t = EmptyOutput(at::IntArrayRef(shape), state_->out_options[index]);
  } catch (const std::exception& e) {  // out of memory: no exception may cross the background thread
    return Status::Unknown(std::string("tfring: could not allocate an output of shape ") + ShapeString(shape) + ": " +
                           e.what());
  }
  state_->outputs[index] = t;
  *out = std::make_shared<TorchTensor>(std::move(t));
  return Status::OK();
}

int HandleTable::Add(std::shared_ptr<OpState> state, int process_set_id, const std::vector<std::string>& names) {
  std::vector<std::string> keys;
  for (const auto& name : names) keys.push_back(std::to_string(process_set_id) + "|" + name);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i)
    if (held_.count(keys[i]))
      throw std::invalid_argument("tfring: a collective named '" + names[i] +
                                  "' is already in flight on this rank (its handle was not synchronized yet); give "
                                  "concurrent collectives distinct names");
  const int handle = ++last_;
  states_[handle] = std::move(state);
  for (const auto& k : keys) held_.insert(k);
  if (!keys.empty()) keys_[handle] = std::move(keys);
  return handle;
}

std::shared_ptr<OpState> HandleTable::Get(int handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(handle);
  if (it == states_.end())
    throw std::invalid_argument("tfring: handle " + std::to_string(handle) + " was not created or has been released");
  return it->second;
}

void HandleTable::Release(int handle) {
  std::shared_ptr<OpState> state;  // destroyed after the lock is released (it may hold the last tensor refs)
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(handle);
  if (it == states_.end()) return;
  state = std::move(it->second);
  states_.erase(it);
  auto k = keys_.find(handle);
  if (k == keys_.end()) return;
  for (const auto& key : k->second) held_.erase(key);
  keys_.erase(k);
}

void HandleTable::Reset() {
  std::unordered_map<int, std::shared_ptr<OpState>> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old.swap(states_);
    keys_.clear();
    held_.clear();
    last_ = 0;
  }
}

}  // namespace torch_binding
}  // namespace tfring
