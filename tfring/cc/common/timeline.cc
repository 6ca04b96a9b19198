#include "timeline.h"

namespace tfring {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

bool Timeline::Start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) return true;
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return false;
  std::fputs("[\n", file_);
  first_ = true;
  mark_cycles_ = mark_cycles;
  start_ = std::chrono::steady_clock::now();
  tracks_.clear();
  return true;
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fputs("\n]\n", file_);  // a complete JSON array: loads in Perfetto and in json.load
  std::fclose(file_);
  file_ = nullptr;
}

int64_t Timeline::Now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
}

void Timeline::WriteLocked(const std::string& json) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
}

int Timeline::TrackLocked(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  const int tid = static_cast<int>(tracks_.size()) + 1;  // track 0 holds the cycle marks
  tracks_[tensor] = tid;
  WriteLocked("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(tid) +
              ",\"args\":{\"name\":\"" + Escape(tensor) + "\"}}");
  return tid;
}

void Timeline::NegotiateStart(const std::string& tensor, const char* op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int tid = TrackLocked(tensor);
  WriteLocked("{\"name\":\"NEGOTIATE_" + std::string(op) + "\",\"ph\":\"B\",\"pid\":0,\"tid\":" + std::to_string(tid) +
              ",\"ts\":" + std::to_string(Now()) + "}");
}

void Timeline::RankReady(const std::string& tensor, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int tid = TrackLocked(tensor);
  WriteLocked("{\"name\":\"READY rank " + std::to_string(rank) +
              "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":" + std::to_string(tid) +
              ",\"ts\":" + std::to_string(Now()) + ",\"args\":{\"rank\":" + std::to_string(rank) + "}}");
}

void Timeline::NegotiateEnd(const std::string& tensor, bool cached) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int tid = TrackLocked(tensor);
  WriteLocked("{\"ph\":\"E\",\"pid\":0,\"tid\":" + std::to_string(tid) + ",\"ts\":" + std::to_string(Now()) +
              ",\"args\":{\"path\":\"" + std::string(cached ? "response cache" : "coordinator") + "\"}}");
}

void Timeline::ActivityStart(const std::vector<std::string>& tensors, const char* activity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int64_t ts = Now();
  for (const auto& t : tensors)
    WriteLocked("{\"name\":\"" + std::string(activity) + "\",\"ph\":\"B\",\"pid\":0,\"tid\":" +
                std::to_string(TrackLocked(t)) + ",\"ts\":" + std::to_string(ts) + "}");
}

void Timeline::ActivityEnd(const std::vector<std::string>& tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  const int64_t ts = Now();
  for (const auto& t : tensors)
    WriteLocked("{\"ph\":\"E\",\"pid\":0,\"tid\":" + std::to_string(TrackLocked(t)) + ",\"ts\":" + std::to_string(ts) +
                "}");
}

void Timeline::Cycle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_ || !mark_cycles_) return;
  WriteLocked("{\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"g\",\"pid\":0,\"tid\":0,\"ts\":" + std::to_string(Now()) +
              "}");
}

}  // namespace tfring
