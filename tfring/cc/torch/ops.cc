// tfring.torch._tfring_torch: enqueue functions returning int handles, and poll / wait / release on them
// (Horovod's torch extension API). Python (tfring/torch/mpi_ops.py) adds defaults, autograd and compression.
#include <torch/extension.h>

#ifdef TFRING_HAVE_NCCL
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/block_cache.h"
#include "../common/names.h"
#include "adapter.h"
#include "output_cache.h"

namespace py = pybind11;

namespace tfring {
namespace torch_binding {
namespace {

HandleTable g_handles;
PyObject* g_workers_failed = nullptr;  // tfring.elastic's HorovodInternalError, set from Python (owned ref)

[[noreturn]] void ThrowStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::INVALID_ARGUMENT:  // an argument every rank can see is wrong: Horovod raises ValueError
      throw py::value_error(s.message());
    case StatusCode::WORKERS_FAILED:  // a peer died: elastic jobs roll back on this type
      if (g_workers_failed != nullptr) {
        PyErr_SetString(g_workers_failed, s.message().c_str());
        throw py::error_already_set();
      }
      break;
    default:
      break;
  }
  throw std::runtime_error(s.message());  // disagreement, stall, shutdown: RuntimeError
}

std::string Fn(const char* fn) { return std::string("tfring.") + fn; }

// Checks a tensor argument on this rank, before anything is enqueued (same verdict on every rank that passes the
// same kind of tensor; what only differs across ranks is the coordinator's job).
DataType CheckTensor(const char* fn, const std::string& arg, const at::Tensor& t) {
  if (!t.defined()) throw std::invalid_argument(Fn(fn) + ": " + arg + " is an undefined tensor");
  if (t.layout() != at::kStrided)
    throw std::invalid_argument(Fn(fn) + ": " + arg + " must be a dense (strided) tensor, got layout " +
                                c10::str(t.layout()));
  DataType d;
  if (!FromTorch(t.scalar_type(), &d))
    throw std::invalid_argument(Fn(fn) + ": " + arg + " has dtype " + c10::toString(t.scalar_type()) +
                                ", which tfring does not support (uint8, int8, uint16, int16, int32, int64, "
                                "float16, bfloat16, float32, float64, bool)");
  if (!t.is_cpu() && !t.is_cuda())
    throw std::invalid_argument(Fn(fn) + ": " + arg + " is on device " + t.device().str() +
                                "; tfring runs collectives on CPU (and CUDA in NCCL builds) tensors");
  if (!t.is_contiguous())  // the Python wrappers pass contiguous copies; this guards direct calls
    throw std::invalid_argument(Fn(fn) + ": " + arg + " must be contiguous");
  return d;
}

void CheckSameAs(const char* fn, const at::Tensor& in, const at::Tensor& out) {
  CheckTensor(fn, "output", out);
  if (out.scalar_type() != in.scalar_type() || !out.sizes().equals(in.sizes()) || out.device() != in.device())
    throw std::invalid_argument(Fn(fn) + ": output (" + c10::toString(out.scalar_type()) + " " + c10::str(out.sizes()) +
                                " on " + out.device().str() + ") must match tensor (" +
                                c10::toString(in.scalar_type()) + " " + c10::str(in.sizes()) + " on " +
                                in.device().str() + ")");
}

void CheckReduction(const char* fn, const at::Tensor& t, int reduce_op, OpType op) {
  if (reduce_op < 0 || reduce_op > 5)
    throw std::invalid_argument(Fn(fn) + ": op=" + std::to_string(reduce_op) +
                                " is not a reduce op (Average=0, Sum=1, Adasum=2, Min=3, Max=4, Product=5)");
  if (reduce_op == static_cast<int>(ReduceOp::ADASUM) && op == OpType::REDUCESCATTER)
    throw std::invalid_argument(Fn(fn) + ": op=Adasum is not supported by reducescatter");
  if (t.scalar_type() == at::kBool)  // MPI defines no arithmetic on C bool
    throw std::invalid_argument(Fn(fn) + ": bool tensors cannot be reduced; cast them to an integer dtype");
}

// The entries of one handle and the state they complete. Names are given at Submit, once every argument passed
// its checks: a refused call leaves the count of unnamed collectives as it was.
class Op {
 public:
  // prefix: Horovod's name prefix ("allreduce", "grouped_allgather", ...); name: the user's, or empty.
  Op(const char* prefix, OpType type, int process_set_id, std::string name = "")
      : fn_(prefix), type_(type), set_(process_set_id), name_(std::move(name)), state_(std::make_shared<OpState>()) {}

  // Entry for `input`; `output` undefined: allocated by the core once its shape is negotiated.
  TensorEntry& Add(const std::string& arg, const at::Tensor& input, const at::Tensor& output) {
    TensorEntry e;
    e.request.op = type_;
    e.request.dtype = CheckTensor(fn_, arg, input);
    for (int64_t d : input.sizes()) e.request.shape.push_back(d);
    if (!entries_.empty() && input.device() != state_->inputs[0].device())
      throw std::invalid_argument(Fn(fn_) + ": " + arg + " is on " + input.device().str() + " but tensors[0] is on " +
                                  state_->inputs[0].device().str() + "; a grouped collective needs one device");
    if (input.is_cuda()) {
      e.request.device = input.device().index();  // a build without NCCL refuses it in Enqueue, on every rank
#ifdef TFRING_HAVE_NCCL
      e.gpu_stream = c10::cuda::getCurrentCUDAStream(input.device().index()).stream();
#endif
    }
    e.input = std::make_shared<TorchTensor>(input);
    if (output.defined()) e.output = std::make_shared<TorchTensor>(output);
    e.output_index = static_cast<int>(state_->outputs.size());
    state_->inputs.push_back(input);
    state_->outputs.push_back(output);
    state_->out_options.push_back(input.options());
    entries_.push_back(std::move(e));
    return entries_.back();
  }

  OpState& state() { return *state_; }
  void AddControl(TensorEntry e) { entries_.push_back(std::move(e)); }  // join, barrier: named already

  // Names the entries, then hands them to the core. Refused entries (not initialized, not a member of the set,
  // duplicate name) raise here, as Horovod's enqueue does; errors found in negotiation surface in wait().
  int Submit() {
    if (type_ != OpType::JOIN && type_ != OpType::BARRIER) {
      // Horovod's "<prefix>.<name>", or the core's "<prefix>.noname.<n>" (names.h: the rule of every binding).
      const std::string base = name_.empty() ? UnnamedCounts::Get().Next(fn_, set_) : std::string(fn_) + "." + name_;
      const auto names = TensorNames(base, static_cast<int>(entries_.size()));
      for (size_t i = 0; i < entries_.size(); ++i) entries_[i].request.name = names[i];
    }
    auto& st = state_;
    st->remaining = static_cast<int>(entries_.size());
    st->enqueuer = std::this_thread::get_id();
    StatusCallback cb = st->MakeCallback(st);
    auto ctx = std::make_shared<TorchOpContext>(st);
    for (auto& e : entries_) {
      e.callback = cb;
      e.context = ctx;
    }
    // Only names the user gave are held until synchronize: generated ones are unique until the counts restart
    // (join, init), and a handle the user dropped must not block the restarted count's names.
    std::vector<std::string> names;
    if (!name_.empty() && type_ != OpType::JOIN && type_ != OpType::BARRIER)
      for (const auto& e : entries_) names.push_back(e.request.name);
    const int handle = g_handles.Add(st, set_, names);
    {
      py::gil_scoped_release nogil;  // the core takes its own locks; never hold the GIL across them
      Runtime::Get().Enqueue(std::move(entries_), set_);
    }
    Status refused;
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->failed_at_enqueue) refused = st->status;
    }
    if (!refused.ok()) {
      g_handles.Release(handle);
      ThrowStatus(refused);
    }
    return handle;
  }

 private:
  const char* fn_;
  OpType type_;
  int set_;
  std::string name_;
  std::shared_ptr<OpState> state_;
  std::vector<TensorEntry> entries_;
};

void SetReduction(TensorEntry& e, int reduce_op, double prescale, double postscale) {
  e.request.reduce_op = static_cast<ReduceOp>(reduce_op);
  e.request.prescale = prescale;
  e.request.postscale = postscale;
}

void CheckGroup(const char* fn, const std::vector<at::Tensor>& tensors, const std::vector<at::Tensor>* outputs) {
  if (tensors.empty()) throw std::invalid_argument(Fn(fn) + ": tensors is empty");
  if (outputs && outputs->size() != tensors.size())
    throw std::invalid_argument(Fn(fn) + ": " + std::to_string(outputs->size()) + " outputs for " +
                                std::to_string(tensors.size()) + " tensors");
}

int AllreduceAsync(const at::Tensor& tensor, const at::Tensor& output, const std::string& name, int reduce_op,
                   double prescale, double postscale, int process_set_id) {
  CheckReduction("allreduce", tensor, reduce_op, OpType::ALLREDUCE);
  CheckSameAs("allreduce", tensor, output);
  Op op("allreduce", OpType::ALLREDUCE, process_set_id, name);
  SetReduction(op.Add("tensor", tensor, output), reduce_op, prescale, postscale);
  return op.Submit();
}

int GroupedAllreduceAsync(const std::vector<at::Tensor>& tensors, const std::vector<at::Tensor>& outputs,
                          const std::string& name, int reduce_op, double prescale, double postscale,
                          int process_set_id) {
  CheckGroup("grouped_allreduce", tensors, &outputs);
  Op op("grouped_allreduce", OpType::ALLREDUCE, process_set_id, name);
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckReduction("grouped_allreduce", tensors[i], reduce_op, OpType::ALLREDUCE);
    CheckSameAs("grouped_allreduce", tensors[i], outputs[i]);
    auto& e = op.Add("tensors[" + std::to_string(i) + "]", tensors[i], outputs[i]);
    SetReduction(e, reduce_op, prescale, postscale);
  }
  return op.Submit();
}

int AllgatherAsync(const at::Tensor& tensor, const std::string& name, int process_set_id) {
  Op op("allgather", OpType::ALLGATHER, process_set_id, name);
  op.Add("tensor", tensor, at::Tensor());
  return op.Submit();
}

int GroupedAllgatherAsync(const std::vector<at::Tensor>& tensors, const std::string& name, int process_set_id) {
  CheckGroup("grouped_allgather", tensors, nullptr);
  Op op("grouped_allgather", OpType::ALLGATHER, process_set_id, name);
  for (size_t i = 0; i < tensors.size(); ++i) op.Add("tensors[" + std::to_string(i) + "]", tensors[i], at::Tensor());
  return op.Submit();
}

int BroadcastAsync(const at::Tensor& tensor, const at::Tensor& output, int root_rank, const std::string& name,
                   int process_set_id) {
  CheckSameAs("broadcast", tensor, output);
  Op op("broadcast", OpType::BROADCAST, process_set_id, name);
  // A root out of range is the coordinator's verdict, reported on every rank (ValueError).
  op.Add("tensor", tensor, output).request.root_rank = root_rank;
  return op.Submit();
}

int AlltoallAsync(const at::Tensor& tensor, const std::vector<int64_t>& splits, const std::string& name,
                  int process_set_id) {
  Op op("alltoall", OpType::ALLTOALL, process_set_id, name);
  auto& e = op.Add("tensor", tensor, at::Tensor());
  e.request.splits = splits;  // empty: an even split; the coordinator checks them against every rank
  e.extra_output_index = 1;   // received splits: int32 in host memory, as Horovod's
  op.state().outputs.emplace_back();
  op.state().out_options.push_back(at::TensorOptions().dtype(at::kInt).device(at::kCPU));
  return op.Submit();
}

int ReducescatterAsync(const at::Tensor& tensor, const std::string& name, int reduce_op, double prescale,
                       double postscale, int process_set_id) {
  CheckReduction("reducescatter", tensor, reduce_op, OpType::REDUCESCATTER);
  Op op("reducescatter", OpType::REDUCESCATTER, process_set_id, name);
  SetReduction(op.Add("tensor", tensor, at::Tensor()), reduce_op, prescale, postscale);
  return op.Submit();
}

int GroupedReducescatterAsync(const std::vector<at::Tensor>& tensors, const std::string& name, int reduce_op,
                              double prescale, double postscale, int process_set_id) {
  CheckGroup("grouped_reducescatter", tensors, nullptr);
  Op op("grouped_reducescatter", OpType::REDUCESCATTER, process_set_id, name);
  for (size_t i = 0; i < tensors.size(); ++i) {
    CheckReduction("grouped_reducescatter", tensors[i], reduce_op, OpType::REDUCESCATTER);
    auto& e = op.Add("tensors[" + std::to_string(i) + "]", tensors[i], at::Tensor());
    SetReduction(e, reduce_op, prescale, postscale);
  }
  return op.Submit();
}

// Join and barrier: no tensor; the names are the TF binding's, so a job may mix bindings.
int ControlAsync(OpType type, int process_set_id) {
  Op op(type == OpType::JOIN ? "join" : "barrier", type, process_set_id);
  TensorEntry e;
  e.request.op = type;
  e.request.name = type == OpType::JOIN ? "__tfring_join__" : "__tfring_barrier__";
  if (type == OpType::JOIN) {
    auto& st = op.state();
    st.join_result = at::full(at::IntArrayRef(), -1, at::TensorOptions().dtype(at::kInt));
    e.join_result = st.join_result.data_ptr<int32_t>();
  }
  op.AddControl(std::move(e));
  return op.Submit();
}

bool Poll(int handle) {
  auto st = g_handles.Get(handle);
  std::lock_guard<std::mutex> lock(st->mu);
  return st->done;
}

// Blocks without the GIL until the op completed, then returns its outputs (join: the last joined rank as an int32
// scalar) and releases the handle, or raises the op's error. Signals (Ctrl-C) are checked every 100 ms.
std::vector<at::Tensor> Wait(int handle) {
  auto st = g_handles.Get(handle);
  {
    py::gil_scoped_release nogil;
    std::unique_lock<std::mutex> lock(st->mu);
    while (!st->done) {
      if (st->cv.wait_for(lock, std::chrono::milliseconds(100), [&st] { return st->done; })) break;
      lock.unlock();
      {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      }
      lock.lock();
    }
  }
  Status status;
  std::vector<at::Tensor> outputs;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    status = st->status;
    outputs = st->outputs;
    if (st->join_result.defined()) outputs.push_back(st->join_result);
  }
  g_handles.Release(handle);
  if (!status.ok()) ThrowStatus(status);
  return outputs;
}

void SetWorkersFailedError(py::object type) {
  Py_XDECREF(g_workers_failed);
  g_workers_failed = type.release().ptr();  // kept for the process's life
}

void Reset() { g_handles.Reset(); }

}  // namespace
}  // namespace torch_binding
}  // namespace tfring

PYBIND11_MODULE(_tfring_torch, m) {
  using namespace tfring::torch_binding;
  using tfring::OpType;
  m.doc() = "tfring's PyTorch extension: collectives on the shared tfring runtime (use tfring.torch)";
  m.def("allreduce_async", &AllreduceAsync, py::arg("tensor"), py::arg("output"), py::arg("name"), py::arg("reduce_op"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id"));
  m.def("grouped_allreduce_async", &GroupedAllreduceAsync, py::arg("tensors"), py::arg("outputs"), py::arg("name"),
        py::arg("reduce_op"), py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id"));
  m.def("allgather_async", &AllgatherAsync, py::arg("tensor"), py::arg("name"), py::arg("process_set_id"));
  m.def("grouped_allgather_async", &GroupedAllgatherAsync, py::arg("tensors"), py::arg("name"),
        py::arg("process_set_id"));
  m.def("broadcast_async", &BroadcastAsync, py::arg("tensor"), py::arg("output"), py::arg("root_rank"), py::arg("name"),
        py::arg("process_set_id"));
  m.def("alltoall_async", &AlltoallAsync, py::arg("tensor"), py::arg("splits"), py::arg("name"),
        py::arg("process_set_id"));
  m.def("reducescatter_async", &ReducescatterAsync, py::arg("tensor"), py::arg("name"), py::arg("reduce_op"),
        py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id"));
  m.def("grouped_reducescatter_async", &GroupedReducescatterAsync, py::arg("tensors"), py::arg("name"),
        py::arg("reduce_op"), py::arg("prescale_factor"), py::arg("postscale_factor"), py::arg("process_set_id"));
  m.def("join_async", [](int ps) { return ControlAsync(OpType::JOIN, ps); }, py::arg("process_set_id"));
  m.def("barrier_async", [](int ps) { return ControlAsync(OpType::BARRIER, ps); }, py::arg("process_set_id"));
  m.def("poll", &Poll, py::arg("handle"));
  m.def("wait", &Wait, py::arg("handle"));
  m.def("release", [](int handle) { g_handles.Release(handle); }, py::arg("handle"));
  m.def("reset", &Reset);
  m.def(
      "empty_like", [](const at::Tensor& like) { return EmptyOutput(like.sizes(), like.options()); }, py::arg("like"),
      "An uninitialized contiguous tensor like `like`, warm from the output cache when large");
  m.def(
      "output_cache_stats",
      [] {
        const auto st = tfring::BlockCache::Get()->stats();
        py::dict d;
        d["hits"] = st.hits;
        d["misses"] = st.misses;
        d["evictions"] = st.evictions;
        d["idle_bytes"] = st.idle_bytes;
        d["live_bytes"] = st.live_bytes;
        return d;
      },
      "The process-wide output cache's counters (shared with TensorFlow)");
  m.def("set_workers_failed_error", &SetWorkersFailedError, py::arg("type"));
}
