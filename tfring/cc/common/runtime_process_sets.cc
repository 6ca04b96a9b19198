// The runtime's process-set half: creating sets (at init, or dynamically through a collective of the global
// set), membership checks, per-set topology, and removal.
#include <future>

#include "logging.h"
#include "names.h"
#include "runtime.h"

namespace tfring {

Status Runtime::CreateSet(int id, const std::vector<int>& ranks) {
  auto set = std::make_shared<ProcessSet>();
  set->id = id;
  set->ranks = ranks;
  if (id == 0) {
    set->backend = backend_.get();
  } else {
    // Collective over every rank; a failure on any rank fails it on all, so the tables stay identical.
    Status created = backend_->CreateSubset(ranks, &set->owned);
    Status agreed = AllAgree(created, "create process set " + std::to_string(id));
    if (!agreed.ok()) {
      if (set->owned) {
        // After a worker failure its communicators are revoked, so Finalize keeps them (mpi_context.cc).
        if (agreed.code() == StatusCode::WORKERS_FAILED) set->owned->Revoke();
        set->owned->Finalize();
      }
      return agreed;
    }
    set->backend = set->owned.get();
  }
  if (set->backend) {
    set->topology = set->backend->topology();
    set->queue.reset(new TensorQueue(signal_));
    ControllerOptions options = controller_options_;
    options.set = set->label();
    options.timeline = &timeline_;  // every rank records its side (rank 0 writes them all)
    options.monitor = id == 0 ? &monitor_ : nullptr;
    set->controller.reset(new Controller(set->backend->transport(), *set->queue, options));
  }
  sets_.Put(std::move(set));
  return Status::OK();
}

Status Runtime::CreateStaticSets(const std::vector<std::vector<int>>& static_sets) {
  // Every rank must pass the same sets (communicators are created in this order): compare at rank 0.
  std::string mine;
  for (const auto& ranks : static_sets) mine += RankListString(ranks) + ";";
  std::vector<std::string> all;
  Transport& t = backend_->transport();
  TFR_RETURN_IF_ERROR(t.GatherToRoot(mine, &all));
  std::string verdict;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) {
      verdict = "tfring.init: ranks passed different process_sets: rank 0: " + all[0] + " rank " + std::to_string(r) +
                ": " + all[r] + "; every rank must pass the same list";
      break;
    }
  TFR_RETURN_IF_ERROR(t.BroadcastFromRoot(&verdict));
  if (!verdict.empty()) return Status::InvalidArgument(verdict);
  for (const auto& ranks : static_sets) {
    if (sets_.Find(ranks) >= 0) continue;  // a duplicate (or the global set): Python gives it the same id
    TFR_RETURN_IF_ERROR(CreateSet(sets_.NextId(), ranks));
  }
  return Status::OK();
}

Status Runtime::AllAgree(const Status& local, const std::string& what) {
  std::vector<uint64_t> ok(1, local.ok() ? ~uint64_t(0) : ~uint64_t(1));
  TFR_RETURN_IF_ERROR(backend_->transport().AllreduceBitAnd(&ok));
  if (!local.ok()) return local;
  if (!(ok[0] & 1)) return Status::Unknown("tfring: another rank failed to " + what + " (its own error says why)");
  return Status::OK();
}

Status Runtime::CheckMember(int process_set_id, const ProcessSet* set) const {
  std::shared_ptr<ProcessSet> found;
  if (!set) {
    found = sets_.Get(process_set_id);
    set = found.get();
  }
  if (!set)
    return Status::InvalidArgument("tfring: process_set_id=" + std::to_string(process_set_id) +
                                   " is not a registered process set");
  if (!set->included())
    return Status::InvalidArgument("tfring: this rank (" + std::to_string(topology_.rank) + ") is not in process set " +
                                   std::to_string(process_set_id) + " (ranks " + RankListString(set->ranks) +
                                   "); only its members can run its collectives");
  return Status::OK();
}

bool Runtime::SetTopology(int process_set_id, Topology* out, bool* included) const {
  if (!running_) return false;
  auto set = sets_.Get(process_set_id);
  if (!set) return false;
  *included = set->included();
  if (set->included()) {
    *out = set->topology;
  } else {
    *out = Topology();
    out->size = static_cast<int>(set->ranks.size());
    out->rank = out->local_rank = out->local_size = out->cross_rank = out->cross_size = -1;
  }
  return true;
}

std::vector<std::pair<int, std::vector<int>>> Runtime::ProcessSets() const {
  std::vector<std::pair<int, std::vector<int>>> out;
  for (const auto& set : sets_.All()) out.emplace_back(set->id, set->ranks);
  return out;
}

Status Runtime::ChangeProcessSet(const std::vector<int>& ranks, int remove_id, int* id) {
  if (!settings_.dynamic_process_sets)
    return Status::PreconditionError(
        "tfring: adding or removing process sets after init() needs "
        "TFRING_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1) on every "
        "rank; or pass them to init(process_sets=[...])");
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  auto out = std::make_shared<int32_t>(-1);
  std::vector<TensorEntry> entries(1);
  Request& r = entries[0].request;
  r.name = "__tfring_process_set__";
  r.op = OpType::PROCESS_SET;
  r.root_rank = remove_id;
  r.splits.assign(ranks.begin(), ranks.end());
  entries[0].join_result = out.get();
  entries[0].callback = [done, out](const Status& s) { done->set_value(s); };
  Enqueue(std::move(entries), 0);
  // Bounded like any collective: the stall inspector fails it if some rank never calls it, shutdown drains it.
  result.wait();
  Status s = result.get();
  *id = *out;
  return s;
}

Status Runtime::ApplyProcessSetChange(const Response& response, int* id) {
  *id = -1;
  if (response.root_rank < 0) {  // add
    std::vector<int> ranks(response.sizes.begin(), response.sizes.end());
    if (sets_.Find(ranks) >= 0) return Status::OK();  // duplicate: -1, the same on every rank
    const int new_id = sets_.NextId();
    TFR_RETURN_IF_ERROR(CreateSet(new_id, ranks));
    *id = new_id;
    TFR_LOG(TFR_DEBUG, "added process set " << new_id << " " << RankListString(ranks));
    return Status::OK();
  }
  if (response.root_rank == 0) return Status::OK();  // the global set stays
  auto set = sets_.Remove(response.root_rank);
  if (!set) return Status::OK();
  FinalizeSet(*set, Status::Aborted("tfring: process set " + std::to_string(set->id) + " was removed"));
  UnnamedCounts::Get().RestartSet(set->id);  // a later set may reuse the id: it counts from 1 on every member
  *id = set->id;
  return Status::OK();
}

void Runtime::FinalizeSet(ProcessSet& set, const Status& why) {
  if (set.queue)
    for (auto& e : set.queue->Close(why)) e.callback(why);
  if (set.owned) set.owned->Finalize();
}

}  // namespace tfring
