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
  // Field(x): x in the form its type takes (numbers as they are, strings and vectors after their size); always true,
  // so a message's field list serves Writer and Reader alike (Reader::Field).
  template <typename T>
  bool Field(const T& v) {
    return Put(v), true;
  }
  bool Field(const std::string& s) { return PutString(s), true; }
  bool Field(const std::vector<std::string>& v) {
    Put<uint32_t>(v.size());
    for (const auto& s : v) PutString(s);
    return true;
  }
  template <typename T>
  bool Field(const std::vector<T>& v) {
    return PutInts(v), true;
  }

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
  // Reads what Writer::Field wrote; false where the bytes run out.
  template <typename T>
  bool Field(T& v) {
    return Get(&v);
  }
  bool Field(std::string& s) { return GetString(&s); }
  bool Field(std::vector<std::string>& v) {
    uint32_t n;
    if (!Get(&n)) return false;
    v.resize(n);
    for (auto& s : v)
      if (!GetString(&s)) return false;
    return true;
  }
  template <typename T>
  bool Field(std::vector<T>& v) {
    return GetInts(&v);
  }
  bool Done() const { return pos_ == b_.size(); }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

}  // namespace tfring
