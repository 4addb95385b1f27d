#include "plan.h"

namespace flotilla {

const char* dtypeName(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
  }
  return "unknown";
}

const char* opTypeName(OpType t) {
  switch (t) {
    case OpType::MatMul: return "MatMul";
    case OpType::Add: return "Add";
    case OpType::Sub: return "Sub";
    case OpType::Mul: return "Mul";
    case OpType::Div: return "Div";
    case OpType::Relu: return "Relu";
    case OpType::LeakyRelu: return "LeakyRelu";
    case OpType::Sigmoid: return "Sigmoid";
    case OpType::Tanh: return "Tanh";
    case OpType::Erf: return "Erf";
    case OpType::Gelu: return "Gelu";
    case OpType::Softmax: return "Softmax";
    case OpType::LayerNorm: return "LayerNorm";
    case OpType::Gather: return "Gather";
    case OpType::Reshape: return "Reshape";
    case OpType::Transpose: return "Transpose";
    case OpType::Concat: return "Concat";
    case OpType::Conv: return "Conv";
    case OpType::MaxPool: return "MaxPool";
    case OpType::AveragePool: return "AveragePool";
    case OpType::GlobalAveragePool: return "GlobalAveragePool";
    case OpType::Count: break;
  }
  return "unknown";
}

}  // namespace flotilla
