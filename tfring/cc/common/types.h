// Framework-neutral enums shared by the core, the message codec and the bindings.
// Numeric values follow Horovod's so graphs and attrs built for Horovod keep their meaning.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace tfring {

enum class DataType : uint8_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  INT32 = 4,
  INT64 = 5,
  FLOAT16 = 6,
  FLOAT32 = 7,
  FLOAT64 = 8,
  BOOL = 9,
  BFLOAT16 = 10,
};

// Horovod's ReduceOp numbering (Adasum = 2 is not implemented and is rejected).
enum class ReduceOp : uint8_t { AVERAGE = 0, SUM = 1, ADASUM = 2, MIN = 3, MAX = 4, PRODUCT = 5 };

enum class OpType : uint8_t {
  ALLREDUCE = 0,
  ALLGATHER = 1,
  BROADCAST = 2,
  ALLTOALL = 3,
  REDUCESCATTER = 4,
  JOIN = 5,
  BARRIER = 6,
  PROCESS_SET = 7,  // add (sizes = member ranks) or remove (root_rank = id) a process set; global set only
};

constexpr size_t kNumDataTypes = 11;  // DataType values count from 0

// Tables instead of one switch per mapping: `table` holds the counterpart (a name, a size, another library's
// type) of each value of an enum whose values count from 0, in the enum's order. ByEnum is the entry of v, or
// fallback where v is outside the table; EnumOf finds the value whose entry is `x` (false: none).
template <typename T, size_t N, typename E>
T ByEnum(const T (&table)[N], E v, std::common_type_t<T> fallback) {  // (not deduced: nullptr converts)
  static_assert(!std::is_same<E, DataType>::value || N == kNumDataTypes, "one entry per DataType");
  const size_t i = static_cast<size_t>(v);
  return i < N ? table[i] : fallback;
}
template <typename T, size_t N, typename E>
bool EnumOf(const T (&table)[N], T x, E* out) {
  static_assert(!std::is_same<E, DataType>::value || N == kNumDataTypes, "one entry per DataType");
  for (size_t i = 0; i < N; ++i)
    if (table[i] == x) return *out = static_cast<E>(i), true;
  return false;
}

int DataTypeSize(DataType t);
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType t);
bool IsFloatingPoint(DataType t);

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& s);
std::string ShapeString(const Shape& s);

}  // namespace tfring
