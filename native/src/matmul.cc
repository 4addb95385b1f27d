// MatMul: numpy matmul over rank >= 2 with broadcast leading dims, transA/transB, alpha, a bias row scaled by beta and
// a fused activation, all through sgemm's epilogue. A constant 2-D B is packed once at prepare.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu_kernels.h"

namespace flotilla {
namespace cpu {

namespace {

/** Per-matrix strides (in matrices) of an operand's leading dims against the output's, 0 where it broadcasts. */
std::vector<int64_t> leadStrides(const std::vector<int64_t>& shape, const std::vector<int64_t>& lead) {
  const size_t opRank = shape.size() - 2;
  std::vector<int64_t> strides(lead.size(), 0);
  int64_t stride = 1;
  for (size_t k = lead.size(); k-- > 0;) {
    const size_t back = lead.size() - 1 - k;
    if (back >= opRank) break;
    const int64_t d = shape[opRank - 1 - back];
    strides[k] = d == 1 ? 0 : stride;
    stride *= d;
  }
  return strides;
}

}  // namespace

std::unique_ptr<OpState> prepareMatMul(const OpDesc& op, const std::vector<const TensorDesc*>& inputs) {
  auto state = std::make_unique<MatMulState>();
  const TensorDesc* b = inputs[1];
  int64_t n = -1;
  if (b->dims.size() >= 2 && b->dims[b->dims.size() - 1] >= 0 && b->dims[b->dims.size() - 2] >= 0) {
    n = op.attrs.transB ? b->dims[b->dims.size() - 2] : b->dims[b->dims.size() - 1];
  }
  if (b->isConstant() && b->dims.size() == 2) {
    const int64_t k = op.attrs.transB ? b->dims[1] : b->dims[0];
    state->packed = std::make_unique<PackedB>(op.attrs.transB, k, n, reinterpret_cast<const float*>(b->data.data()),
                                              b->dims[1]);
  }
  const TensorDesc* bias = inputs.size() > 2 ? inputs[2] : nullptr;
  if (bias != nullptr && bias->isConstant() && bias->data.size() == sizeof(float) && n > 1) {
    float v;
    std::memcpy(&v, bias->data.data(), sizeof v);
    state->biasRow.assign(static_cast<size_t>(n), v);
    state->biasRowReady = true;
  }
  return state;
}

void matmul(const OpDesc& op, MatMulState* state, const std::vector<TensorRef>& inputs, const TensorRef& y,
            ThreadPool* pool) {
  const OpAttrs& at = op.attrs;
  const TensorRef& a = inputs[0];
  const TensorRef& b = inputs[1];
  const size_t ra = a.shape.size(), rb = b.shape.size(), ry = y.shape.size();
  const int64_t m = at.transA ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t k = at.transA ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t n = at.transB ? b.shape[rb - 2] : b.shape[rb - 1];
  const int64_t lda = a.shape[ra - 1], ldb = b.shape[rb - 1];
  if (y.numel() == 0) return;

  GemmEpilogue epi;
  epi.biasScale = at.beta;
  // Every activation in the epilogue, on each tile while it is in L1: a separate pass over Y (activateInPlace) cost
  // the transformer's Gelu after its up-projection a read and a write of all of Y and a fork-join more.
  epi.activation = at.activation;
  epi.activationAlpha = at.activationAlpha;
  if (inputs.size() > 2 && inputs[2].data != nullptr) {
    const TensorRef& bias = inputs[2];
    if (bias.numel() == n) {
      epi.colBias = bias.f32();
    } else {
      if (!state->biasRowReady || static_cast<int64_t>(state->biasRow.size()) != n) {
        state->biasRow.assign(static_cast<size_t>(n), bias.f32()[0]);
      }
      epi.colBias = state->biasRow.data();
    }
  }
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  const int64_t matA = m * k, matY = m * n;
  const PackedB* packed =
      state != nullptr && state->packed != nullptr && state->packed->isa() == gemmIsa() ? state->packed.get() : nullptr;

  if (rb == 2) {
    const int64_t batches = a.numel() / std::max<int64_t>(matA, 1);
    if (!at.transA) {
      // A's leading dims are more rows of one product.
      const int64_t rows = batches * m;
      if (packed != nullptr) {
        sgemmPacked(false, rows, at.alpha, pa, lda, *packed, py, n, epi, pool);
      } else {
        sgemm(false, at.transB, rows, n, k, at.alpha, pa, lda, pb, ldb, 0.0f, py, n, epi, pool);
      }
      return;
    }
    for (int64_t i = 0; i < batches; i++) {
      if (packed != nullptr) {
        sgemmPacked(true, m, at.alpha, pa + i * matA, lda, *packed, py + i * matY, n, epi, pool);
      } else {
        sgemm(true, at.transB, m, n, k, at.alpha, pa + i * matA, lda, pb, ldb, 0.0f, py + i * matY, n, epi, pool);
      }
    }
    return;
  }

  // Leading dims broadcast: one product per output matrix.
  const std::vector<int64_t> lead(y.shape.begin(), y.shape.begin() + static_cast<std::ptrdiff_t>(ry - 2));
  const std::vector<int64_t> sa = leadStrides(a.shape, lead), sb = leadStrides(b.shape, lead);
  int64_t count = 1;
  for (int64_t d : lead) count *= d;
  const int64_t matB = k * n;
  auto product = [&](int64_t t, ThreadPool* inner) {
    int64_t offA = 0, offB = 0, rest = t;
    for (size_t d = lead.size(); d-- > 0;) {
      const int64_t i = rest % lead[d];
      rest /= lead[d];
      offA += i * sa[d];
      offB += i * sb[d];
    }
    sgemm(at.transA, at.transB, m, n, k, at.alpha, pa + offA * matA, lda, pb + offB * matB, ldb, 0.0f,
          py + t * matY, n, epi, inner);
  };
  const int threads = pool != nullptr ? pool->size() : 1;
  if (threads > 1 && count >= threads && m * n * k <= 256 * 256 * 256 && count * m * n * k >= 64 * 64 * 64) {
    // Many small products (attention heads): each on one thread, shared out by parallelItems, so a helper that
    // starts late or is descheduled leaves its products to the others instead of holding the op up.
    parallelItems(pool, count, [&](int64_t t) { product(t, nullptr); });
    return;
  }
  for (int64_t t = 0; t < count; t++) product(t, pool);
}

}  // namespace cpu
}  // namespace flotilla
