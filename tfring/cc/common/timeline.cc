#include "timeline.h"

#include <chrono>

#include "codec.h"

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

int64_t Timeline::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Timeline::Start(const std::string& path, bool mark_cycles, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (on_) return true;
  rank_ = rank;
  if (rank == 0) {
    file_ = std::fopen(path.c_str(), "w");
    if (!file_) return false;
    std::fputs("[\n", file_);
  }
  first_ = true;
  buffer_.clear();  // a previous run's events (maybe under another rank number) do not belong to this file
  buffered_ = 0;
  dropped_ = 0;
  mark_cycles_ = mark_cycles;
  start_us_ = NowUs();
  tracks_.clear();
  named_.clear();
  on_ = true;
  return true;
}

void Timeline::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_) return;
  on_ = false;
  if (!file_) return;
  std::fputs("\n]\n", file_);  // a complete JSON array: loads in Perfetto and in json.load
  std::fclose(file_);
  file_ = nullptr;
}

void Timeline::PutLocked(const std::string& json) {
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
}

int Timeline::TrackLocked(int rank, const std::string& track) {
  if (!named_.count(rank)) {  // one process per rank, in rank order
    named_[rank] = true;
    const std::string pid = std::to_string(rank);
    PutLocked("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"rank " + pid + "\"}}");
    PutLocked("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid +
              "}}");
  }
  if (track.empty()) return 0;
  auto it = tracks_.find({rank, track});
  if (it != tracks_.end()) return it->second;
  const int tid = static_cast<int>(tracks_.size()) + 1;
  tracks_[{rank, track}] = tid;
  PutLocked("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(rank) +
            ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":\"" + Escape(track) + "\"}}");
  return tid;
}

void Timeline::WriteLocked(int rank, int64_t ts, const std::string& track, const std::string& tail) {
  const int tid = TrackLocked(rank, track);
  PutLocked("{\"ts\":" + std::to_string(ts - start_us_) + ",\"pid\":" + std::to_string(rank) +
            ",\"tid\":" + std::to_string(tid) + "," + tail + "}");
}

void Timeline::Record(int64_t ts, const std::string& track, const std::string& tail) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!on_) return;
  if (file_) return WriteLocked(rank_, ts, track, tail);
  if (buffered_ >= kMaxBuffered) {
    ++dropped_;
    return;
  }
  Writer w;
  w.Put<int64_t>(ts);
  w.PutString(track);
  w.PutString(tail);
  buffer_.push_back(w.Take());
  buffered_ += buffer_.back().size();
}

std::string Timeline::TakeShipment(size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer_.empty() && dropped_ == 0) return std::string();
  Writer w;
  w.Put<uint64_t>(dropped_);
  std::string out = w.Take();
  while (!buffer_.empty() && out.size() + buffer_.front().size() <= limit + 8) {
    out += buffer_.front();
    buffered_ -= buffer_.front().size();
    buffer_.pop_front();
  }
  dropped_ = 0;
  return out;
}

void Timeline::WriteShipment(int rank, const std::string& bytes, int64_t offset_us) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_ || bytes.empty()) return;
  Reader r(bytes);
  uint64_t dropped = 0;
  int64_t ts = 0, last = start_us_;
  std::string track, tail;
  if (!r.Get(&dropped)) return;
  while (r.Get(&ts) && r.GetString(&track) && r.GetString(&tail)) {
    last = ts - offset_us;
    WriteLocked(rank, last, track, tail);
  }
  if (dropped > 0)
    WriteLocked(rank, last, "",
                "\"name\":\"" + std::to_string(dropped) + " events dropped (buffer full)\",\"ph\":\"i\",\"s\":\"p\"");
}

void Timeline::NegotiateStart(const std::string& tensor, const char* op) {
  if (on_) Record(NowUs(), tensor, "\"name\":\"NEGOTIATE_" + std::string(op) + "\",\"ph\":\"B\"");
}

void Timeline::RankReady(const std::string& tensor, int rank) {
  if (!on_) return;
  const std::string r = std::to_string(rank);
  Record(NowUs(), tensor, "\"name\":\"READY rank " + r + "\",\"ph\":\"i\",\"s\":\"t\",\"args\":{\"rank\":" + r + "}");
}

void Timeline::NegotiateEnd(const std::string& tensor, bool cached) {
  if (on_)
    Record(NowUs(), tensor,
           std::string("\"ph\":\"E\",\"args\":{\"path\":\"") + (cached ? "response cache" : "coordinator") + "\"}");
}

void Timeline::ActivityStart(const std::vector<std::string>& tensors, const char* activity) {
  if (!on_) return;
  const int64_t ts = NowUs();
  const std::string tail = "\"name\":\"" + std::string(activity) + "\",\"ph\":\"B\"";
  for (const auto& t : tensors) Record(ts, t, tail);
}

void Timeline::ActivityEnd(const std::vector<std::string>& tensors) {
  if (!on_) return;
  const int64_t ts = NowUs();
  for (const auto& t : tensors) Record(ts, t, "\"ph\":\"E\"");
}

void Timeline::Cycle() {
  if (on_ && mark_cycles_) Record(NowUs(), "", "\"name\":\"CYCLE_START\",\"ph\":\"i\",\"s\":\"p\"");
}

}  // namespace tfring
