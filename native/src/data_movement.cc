// Gather, Transpose, Concat and plain copies: bytes moved by element size (4 or 8), so they serve float32, int32 and
// int64 alike.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_kernels.h"

namespace flotilla {
namespace cpu {

void copy(const TensorRef& x, const TensorRef& y) {
  if (x.data == y.data) return;
  const size_t bytes = static_cast<size_t>(y.numel()) * dtypeSize(y.dtype);
  if (bytes > 0) std::memmove(y.data, x.data, bytes);
}

void gather(const TensorRef& data, const TensorRef& indices, const TensorRef& y, int axis) {
  const size_t elem = dtypeSize(data.dtype);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= data.shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < data.shape.size(); i++) inner *= data.shape[i];
  const int64_t n = data.shape[static_cast<size_t>(axis)];
  const int64_t count = indices.numel();
  const size_t block = static_cast<size_t>(inner) * elem;
  // Check every index before writing anything.
  thread_local std::vector<int64_t> resolved;
  resolved.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; i++) {
    const int64_t v = indices.dtype == DType::I64 ? static_cast<const int64_t*>(indices.data)[i]
                                                  : static_cast<int64_t>(static_cast<const int32_t*>(indices.data)[i]);
    if (v < -n || v >= n) {
      throw std::invalid_argument("index " + std::to_string(v) + " (element " + std::to_string(i) +
                                  " of the indices) is out of range [" + std::to_string(-n) + ", " +
                                  std::to_string(n) + ") for axis " + std::to_string(axis) + " of size " +
                                  std::to_string(n));
    }
    resolved[static_cast<size_t>(i)] = v < 0 ? v + n : v;
  }
  const auto* src = static_cast<const uint8_t*>(data.data);
  auto* dst = static_cast<uint8_t*>(y.data);
  for (int64_t o = 0; o < outer; o++) {
    const uint8_t* base = src + static_cast<size_t>(o * n) * block;
    for (int64_t i = 0; i < count; i++) {
      std::memcpy(dst, base + static_cast<size_t>(resolved[static_cast<size_t>(i)]) * block, block);
      dst += block;
    }
  }
}

void concat(const std::vector<TensorRef>& inputs, const TensorRef& y, int axis) {
  const size_t elem = dtypeSize(y.dtype);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= y.shape[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < y.shape.size(); i++) inner *= y.shape[i];
  auto* dst = static_cast<uint8_t*>(y.data);
  for (int64_t o = 0; o < outer; o++) {
    for (const TensorRef& x : inputs) {
      const size_t bytes = static_cast<size_t>(x.shape[static_cast<size_t>(axis)] * inner) * elem;
      if (bytes == 0) continue;
      std::memcpy(dst, static_cast<const uint8_t*>(x.data) + static_cast<size_t>(o) * bytes, bytes);
      dst += bytes;
    }
  }
}

namespace {

/** y[i][j] = x[j][i] for an r x c block of x (x row stride ldx, y row stride ldy), in cache-sized tiles. */
template <typename T>
void transpose2d(const T* __restrict x, int64_t rows, int64_t cols, int64_t ldx, T* __restrict y, int64_t ldy) {
  constexpr int64_t tile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += tile) {
    const int64_t i1 = std::min(rows, i0 + tile);
    for (int64_t j0 = 0; j0 < cols; j0 += tile) {
      const int64_t j1 = std::min(cols, j0 + tile);
      for (int64_t j = j0; j < j1; j++) {
        for (int64_t i = i0; i < i1; i++) y[j * ldy + i] = x[i * ldx + j];
      }
    }
  }
}

template <typename T>
void transposeTyped(const T* x, T* y, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  // dims/strides: the output's dims (merged) and each one's stride in x; innermost last.
  const size_t rank = dims.size();
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  if (rank == 0) {
    y[0] = x[0];
    return;
  }
  if (strides[rank - 1] == 1) {
    // The innermost dim stays innermost: copy rows.
    const int64_t inner = dims[rank - 1];
    const int64_t outer = total / inner;
    std::vector<int64_t> idx(rank, 0);
    int64_t off = 0;
    for (int64_t o = 0; o < outer; o++) {
      // Rows are often short (a head's 32 values): an inlined copy, not a call to memcpy per row.
      std::copy(x + off, x + off + inner, y + o * inner);
      for (size_t d = rank - 1; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < dims[d]) break;
        off -= strides[d] * dims[d];
        idx[d] = 0;
      }
    }
    return;
  }
  if (rank >= 2 && strides[rank - 2] == 1) {
    // The last two dims swap (per leading index): tiled 2-D transposes.
    const int64_t r = dims[rank - 1], c = dims[rank - 2];
    const int64_t outer = total / (r * c);
    std::vector<int64_t> idx(rank, 0);
    int64_t off = 0;
    for (int64_t o = 0; o < outer; o++) {
      // The y block is [c][r] with y[a][b] = x[off + a + b * strides[rank - 1]].
      transpose2d(x + off, r, c, strides[rank - 1], y + o * r * c, r);
      for (size_t d = rank - 2; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < dims[d]) break;
        off -= strides[d] * dims[d];
        idx[d] = 0;
      }
    }
    return;
  }
  // General: walk y in order.
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  const int64_t inner = dims[rank - 1], innerStride = strides[rank - 1];
  for (int64_t o = 0; o < total; o += inner) {
    T* out = y + o;
    for (int64_t j = 0; j < inner; j++) out[j] = x[off + j * innerStride];
    for (size_t d = rank - 1; d-- > 0;) {
      off += strides[d];
      if (++idx[d] < dims[d]) break;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

}  // namespace

void transpose(const TensorRef& x, const TensorRef& y, const std::vector<int32_t>& perm, ThreadPool* pool) {
  const size_t rank = x.shape.size();
  std::vector<int64_t> xStrides(rank, 1);
  for (size_t k = rank; k-- > 1;) xStrides[k - 1] = xStrides[k] * x.shape[k];
  // Output dims with their strides in x; size-1 dims dropped, dims adjacent in both merged.
  std::vector<int64_t> dims, strides;
  for (size_t i = 0; i < rank; i++) {
    const size_t p = static_cast<size_t>(perm[i]);
    const int64_t d = x.shape[p];
    if (d == 1) continue;
    if (!dims.empty() && strides.back() == xStrides[p] * d) {
      dims.back() *= d;
      strides.back() = xStrides[p];
      continue;
    }
    dims.push_back(d);
    strides.push_back(xStrides[p]);
  }
  if (dims.size() <= 1) {
    copy(x, y);
    return;
  }
  // Split the outermost output dim across threads: each part is a transpose of its own, of a slab of y.
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  const int64_t slab = total / dims[0];
  parallelRange(pool, dims[0], slab, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> part = dims;
    part[0] = end - begin;
    if (dtypeSize(x.dtype) == 8) {
      transposeTyped(static_cast<const uint64_t*>(x.data) + begin * strides[0],
                     static_cast<uint64_t*>(y.data) + begin * slab, part, strides);
    } else {
      transposeTyped(static_cast<const uint32_t*>(x.data) + begin * strides[0],
                     static_cast<uint32_t*>(y.data) + begin * slab, part, strides);
    }
  });
}

}  // namespace cpu
}  // namespace flotilla
