#include "types.h"

namespace tfring {

int DataTypeSize(DataType t) {
  static const int kSizes[] = {1, 1, 2, 2, 4, 8, 2, 4, 8, 1, 2};
  return ByEnum(kSizes, t, 0);
}

const char* DataTypeName(DataType t) {
  static const char* const kNames[] = {"uint8",   "int8",    "uint16",  "int16", "int32",   "int64",
                                       "float16", "float32", "float64", "bool",  "bfloat16"};
  return ByEnum(kNames, t, "unknown");
}

const char* ReduceOpName(ReduceOp op) {
  static const char* const kNames[] = {"Average", "Sum", "Adasum", "Min", "Max", "Product"};
  return ByEnum(kNames, op, "unknown");
}

const char* OpTypeName(OpType t) {
  static const char* const kNames[] = {"allreduce",     "allgather", "broadcast", "alltoall",
                                       "reducescatter", "join",      "barrier",   "process set change"};
  return ByEnum(kNames, t, "unknown");
}

bool IsFloatingPoint(DataType t) {
  return t == DataType::FLOAT16 || t == DataType::BFLOAT16 || t == DataType::FLOAT32 || t == DataType::FLOAT64;
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string ShapeString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace tfring
