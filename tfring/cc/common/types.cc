#include "types.h"

namespace tfring {

int DataTypeSize(DataType t) {
  switch (t) {
    case DataType::UINT8:
    case DataType::INT8:
    case DataType::BOOL:
      return 1;
    case DataType::UINT16:
    case DataType::INT16:
    case DataType::FLOAT16:
    case DataType::BFLOAT16:
      return 2;
    case DataType::INT32:
    case DataType::FLOAT32:
      return 4;
    case DataType::INT64:
    case DataType::FLOAT64:
      return 8;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::UINT8:
      return "uint8";
    case DataType::INT8:
      return "int8";
    case DataType::UINT16:
      return "uint16";
    case DataType::INT16:
      return "int16";
    case DataType::INT32:
      return "int32";
    case DataType::INT64:
      return "int64";
    case DataType::FLOAT16:
      return "float16";
    case DataType::BFLOAT16:
      return "bfloat16";
    case DataType::FLOAT32:
      return "float32";
    case DataType::FLOAT64:
      return "float64";
    case DataType::BOOL:
      return "bool";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::AVERAGE:
      return "Average";
    case ReduceOp::SUM:
      return "Sum";
    case ReduceOp::ADASUM:
      return "Adasum";
    case ReduceOp::MIN:
      return "Min";
    case ReduceOp::MAX:
      return "Max";
    case ReduceOp::PRODUCT:
      return "Product";
  }
  return "unknown";
}

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::ALLREDUCE:
      return "allreduce";
    case OpType::ALLGATHER:
      return "allgather";
    case OpType::BROADCAST:
      return "broadcast";
    case OpType::ALLTOALL:
      return "alltoall";
    case OpType::REDUCESCATTER:
      return "reducescatter";
    case OpType::JOIN:
      return "join";
    case OpType::BARRIER:
      return "barrier";
    case OpType::PROCESS_SET:
      return "process set change";
  }
  return "unknown";
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
