#include "cpu_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "cpu_kernels.h"

namespace flotilla {

CpuDevice::CpuDevice(int threads) {
  if (threads > 0) {
    ownPool_ = std::make_unique<ThreadPool>(threads);
    pool_ = ownPool_.get();
  } else {
    pool_ = &defaultThreadPool();
  }
}

void* CpuDevice::allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void CpuDevice::release(void* ptr) noexcept { std::free(ptr); }

void CpuDevice::copyIn(void* dst, const void* hostSrc, size_t bytes) {
  if (bytes > 0 && dst != hostSrc) std::memcpy(dst, hostSrc, bytes);
}

void CpuDevice::copyOut(void* hostDst, const void* src, size_t bytes) {
  if (bytes > 0 && hostDst != src) std::memcpy(hostDst, src, bytes);
}

void CpuDevice::fill(float* dst, float value, size_t count) { std::fill_n(dst, count, value); }

std::unique_ptr<OpState> CpuDevice::prepare(const OpDesc& op, const std::vector<const TensorDesc*>& inputs,
                                            Precision) {
  switch (op.type) {
    case OpType::MatMul: return cpu::prepareMatMul(op, inputs);
    case OpType::Conv: return cpu::prepareConv(op, inputs);
    default: return nullptr;
  }
}

void CpuDevice::run(const OpDesc& op, OpState* state, const std::vector<TensorRef>& in,
                    const std::vector<TensorRef>& out) {
  const TensorRef& y = out[0];
  const OpAttrs& at = op.attrs;
  switch (op.type) {
    case OpType::MatMul:
      cpu::matmul(op, static_cast<cpu::MatMulState*>(state), in, y, pool_);
      return;
    case OpType::Add:
    case OpType::Sub:
    case OpType::Mul:
    case OpType::Div:
      cpu::binary(op.type, in[0], in[1], y, pool_);
      return;
    case OpType::Relu:
      cpu::unary(cpu::Unary::Relu, 0.0f, in[0].f32(), y.f32(), y.numel(), pool_);
      return;
    case OpType::LeakyRelu:
      cpu::unary(cpu::Unary::LeakyRelu, at.alpha, in[0].f32(), y.f32(), y.numel(), pool_);
      return;
    case OpType::Sigmoid:
      cpu::unary(cpu::Unary::Sigmoid, 0.0f, in[0].f32(), y.f32(), y.numel(), pool_);
      return;
    case OpType::Tanh:
      cpu::unary(cpu::Unary::Tanh, 0.0f, in[0].f32(), y.f32(), y.numel(), pool_);
      return;
    case OpType::Erf:
      cpu::unary(cpu::Unary::Erf, 0.0f, in[0].f32(), y.f32(), y.numel(), pool_);
      return;
    case OpType::Gelu:
      cpu::unary(at.activation == Activation::GeluTanh ? cpu::Unary::GeluTanh : cpu::Unary::Gelu, 0.0f, in[0].f32(),
                 y.f32(), y.numel(), pool_);
      return;
    case OpType::Softmax:
      cpu::softmax(in[0], y, at.axis, pool_);
      return;
    case OpType::LayerNorm:
      cpu::layerNorm(in[0], in[1].f32(), in.size() > 2 && in[2].data != nullptr ? in[2].f32() : nullptr, y, at.axis,
                     at.epsilon, pool_);
      return;
    case OpType::Gather:
      cpu::gather(in[0], in[1], y, at.axis);
      return;
    case OpType::Reshape:
      cpu::copy(in[0], y);
      return;
    case OpType::Transpose:
      cpu::transpose(in[0], y, at.perm, pool_);
      return;
    case OpType::Concat:
      cpu::concat(in, y, at.axis);
      return;
    case OpType::Conv:
      cpu::conv(op, static_cast<cpu::ConvState*>(state), in, y, pool_);
      return;
    case OpType::MaxPool:
      cpu::maxPool(at, in[0], y, pool_);
      return;
    case OpType::AveragePool:
      cpu::averagePool(at, in[0], y, pool_);
      return;
    case OpType::GlobalAveragePool:
      cpu::globalAveragePool(in[0], y, pool_);
      return;
    case OpType::Count:
      break;
  }
  throw std::logic_error("the CPU device has no kernel for this op type");
}

std::unique_ptr<Device> createCpuDevice(int threads) { return std::make_unique<CpuDevice>(threads); }

}  // namespace flotilla
