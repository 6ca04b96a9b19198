// Framework-neutral enums shared by the core, the message codec and the bindings.
// Numeric values follow Horovod's so graphs and attrs built for Horovod keep their meaning.
#pragma once
#include <cstdint>
#include <string>
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

int DataTypeSize(DataType t);
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType t);
bool IsFloatingPoint(DataType t);

using Shape = std::vector<int64_t>;
int64_t NumElements(const Shape& s);
std::string ShapeString(const Shape& s);

}  // namespace tfring
