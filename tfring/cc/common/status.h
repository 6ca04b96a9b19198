// Status: the one error type of the core. No exception crosses the background thread.
#pragma once
#include <string>
#include <utility>

namespace tfring {

// WORKERS_FAILED: a peer process died or left (ULFM); the communicators are revoked and elastic jobs reset.
enum class StatusCode {
  OK = 0,
  INVALID_ARGUMENT,
  PRECONDITION_ERROR,
  ABORTED,
  UNKNOWN,
  DEADLINE_EXCEEDED,
  WORKERS_FAILED
};

// The names the C API gives the codes (tfring_status_code): the bindings read the values instead of typing them.
inline const char* StatusCodeName(StatusCode c) {
  static const char* names[] = {"OK",      "INVALID_ARGUMENT",  "PRECONDITION_ERROR", "ABORTED",
                                "UNKNOWN", "DEADLINE_EXCEEDED", "WORKERS_FAILED"};
  return names[static_cast<int>(c)];
}

// How every WORKERS_FAILED message starts: frameworks whose errors carry only text (TensorFlow's) are told apart
// by it (tfring.common.errors reads it through tfring_workers_failed_mark).
constexpr const char* kWorkersFailedMark = "tfring: a worker process failed or left the job";

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::INVALID_ARGUMENT, std::move(m)}; }
  static Status PreconditionError(std::string m) { return {StatusCode::PRECONDITION_ERROR, std::move(m)}; }
  static Status Aborted(std::string m) { return {StatusCode::ABORTED, std::move(m)}; }
  static Status Unknown(std::string m) { return {StatusCode::UNKNOWN, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::DEADLINE_EXCEEDED, std::move(m)}; }
  static Status WorkersFailed(std::string m) { return {StatusCode::WORKERS_FAILED, std::move(m)}; }
  bool ok() const { return code_ == StatusCode::OK; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }

 private:
  StatusCode code_ = StatusCode::OK;
  std::string msg_;
};

}  // namespace tfring

#define TFR_RETURN_IF_ERROR(expr)     \
  do {                                \
    ::tfring::Status _tfr_s = (expr); \
    if (!_tfr_s.ok()) return _tfr_s;  \
  } while (0)
