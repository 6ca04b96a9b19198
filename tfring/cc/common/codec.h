// Fixed-width byte writer/reader for the messages ranks exchange (negotiation, monitor rounds). Both ends
// are the same build, so host byte order is fine.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tfring {

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    buf_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(s.size());
    buf_ += s;
  }
  template <typename T>
  void PutInts(const std::vector<T>& v) {
    Put<uint32_t>(v.size());
    buf_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string Take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > b_.size()) return false;
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || pos_ + n > b_.size()) return false;
    s->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool GetInts(std::vector<T>* v) {
    uint32_t n;
    if (!Get(&n) || pos_ + static_cast<size_t>(n) * sizeof(T) > b_.size()) return false;
    v->resize(n);
    std::memcpy(v->data(), b_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool Done() const { return pos_ == b_.size(); }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace tfring
