// The host-side builders of index_math.h: shape checks and the by-value index structs the kernels take.
#include "index_math.h"

#include <algorithm>
#include <sstream>

namespace flotilla {
namespace gpu {

std::string shapeString(const std::vector<int64_t>& dims) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? ", " : "") << dims[i];
  s << ']';
  return s.str();
}

namespace {

bool fail(std::string* error, const std::string& message) {
  if (error) *error = message;
  return false;
}

/** Strides of `dims` right-aligned into `rank` dims, 0 where the operand has size 1 (or no dim) and broadcasts. */
std::vector<int64_t> broadcastStrides(const std::vector<int64_t>& dims, size_t rank) {
  const std::vector<int64_t> contiguous = contiguousStrides(dims);
  std::vector<int64_t> s(rank, 0);
  const size_t lead = rank - dims.size();
  for (size_t i = 0; i < dims.size(); ++i) s[lead + i] = dims[i] == 1 ? 0 : contiguous[i];
  return s;
}

}  // namespace

bool makeBroadcast(const std::vector<int64_t>& out, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                   StridedIndex<2>* map, std::string* error) {
  const size_t rank = out.size();
  if (a.size() > rank || b.size() > rank) {
    return fail(error, "operands " + shapeString(a) + " and " + shapeString(b) + " do not broadcast to " +
                           shapeString(out));
  }
  for (size_t i = 0; i < rank; ++i) {
    const int64_t ad = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t bd = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    const int64_t expected = ad == 1 ? bd : ad;
    if ((bd != 1 && bd != ad && ad != 1) || out[i] != expected) {
      return fail(error, "operands " + shapeString(a) + " and " + shapeString(b) + " do not broadcast to " +
                             shapeString(out));
    }
  }
  if (!coalesce<2>(out, {broadcastStrides(a, rank), broadcastStrides(b, rank)}, map)) {
    return fail(error, "broadcast of " + shapeString(a) + " and " + shapeString(b) + " needs more than " +
                           std::to_string(kMaxRank) + " dimensions");
  }
  return true;
}

bool makeTranspose(const std::vector<int64_t>& in, const std::vector<int32_t>& perm, const std::vector<int64_t>& out,
                   StridedIndex<1>* map, std::string* error) {
  const size_t rank = in.size();
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank && out.size() == rank;
  for (size_t i = 0; valid && i < rank; ++i) {
    const int32_t p = perm[i];
    valid = p >= 0 && static_cast<size_t>(p) < rank && !seen[static_cast<size_t>(p)];
    if (valid) seen[static_cast<size_t>(p)] = true;
  }
  if (!valid) return fail(error, "perm does not permute the dims of " + shapeString(in));
  const std::vector<int64_t> inStrides = contiguousStrides(in);
  std::vector<int64_t> dims(rank), strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    dims[i] = in[static_cast<size_t>(perm[i])];
    strides[i] = inStrides[static_cast<size_t>(perm[i])];
    if (out[i] != dims[i]) {
      return fail(error, "output " + shapeString(out) + " is not the transpose of " + shapeString(in));
    }
  }
  if (!coalesce<1>(dims, {strides}, map)) {
    return fail(error, "transpose of " + shapeString(in) + " needs more than " + std::to_string(kMaxRank) +
                           " dimensions");
  }
  return true;
}

bool planGemm(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& out,
              bool transA, bool transB, GemmPlan* plan, std::string* error) {
  if (a.empty() || b.empty()) return fail(error, "MatMul operands need rank >= 1");
  std::vector<int64_t> ad = a, bd = b;
  if (ad.size() == 1) {
    ad = {1, a[0]};
    transA = false;
  }
  if (bd.size() == 1) {
    bd = {b[0], 1};
    transB = false;
  }
  const int64_t aRows = ad[ad.size() - 2], aCols = ad[ad.size() - 1];
  const int64_t bRows = bd[bd.size() - 2], bCols = bd[bd.size() - 1];
  GemmPlan p;
  p.transA = transA;
  p.transB = transB;
  p.m = transA ? aCols : aRows;
  p.k = transA ? aRows : aCols;
  p.n = transB ? bRows : bCols;
  const int64_t kB = transB ? bCols : bRows;
  if (kB != p.k) {
    return fail(error, "inner dimensions differ: A " + shapeString(a) + (transA ? " (transposed)" : "") + ", B " +
                           shapeString(b) + (transB ? " (transposed)" : ""));
  }
  const std::vector<int64_t> aBatch(ad.begin(), ad.end() - 2), bBatch(bd.begin(), bd.end() - 2);
  const size_t rank = std::max(aBatch.size(), bBatch.size());
  std::vector<int64_t> batch(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i + aBatch.size() >= rank ? aBatch[i + aBatch.size() - rank] : 1;
    const int64_t y = i + bBatch.size() >= rank ? bBatch[i + bBatch.size() - rank] : 1;
    if (x != y && x != 1 && y != 1) {
      return fail(error, "batch dimensions of A " + shapeString(a) + " and B " + shapeString(b) + " do not broadcast");
    }
    batch[i] = x == 1 ? y : x;
  }
  p.batchA = product(aBatch);
  p.batchB = product(bBatch);
  p.batch = product(batch);
  if (product(out) != p.batch * p.m * p.n) {
    return fail(error, "output " + shapeString(out) + " does not hold the product of A " + shapeString(a) + " and B " +
                           shapeString(b));
  }
  const std::vector<int64_t> none(rank, 0);
  if (!coalesce<4>(batch, {broadcastStrides(aBatch, rank), broadcastStrides(bBatch, rank), contiguousStrides(batch),
                           none},
                   &p.batchMap)) {
    return fail(error, "batch dimensions of A " + shapeString(a) + " and B " + shapeString(b) + " need more than " +
                           std::to_string(kMaxRank) + " dimensions");
  }
  const StridedIndex<4>& m = p.batchMap;
  if (!transA && m.rank == 1 && m.strides[0][0] == 1 && m.strides[1][0] == 0 && m.strides[2][0] == 1) {
    // B is shared by every batch and A's batches are contiguous rows: one [batch*M, K] x [K, N] product.
    p.m *= m.dims[0];
    p.batch = 1;
    p.batchMap = StridedIndex<4>{};
  }
  *plan = p;
  return true;
}

namespace {

int64_t attr(const std::vector<int32_t>& v, size_t i, int64_t fallback) {
  return i < v.size() ? static_cast<int64_t>(v[i]) : fallback;
}

/** Strides, pads and dilations with ONNX's defaults; false when one is out of range. */
bool windowAttrs(const OpAttrs& attrs, ConvGeometry* g, std::string* error) {
  g->sh = attr(attrs.strides, 0, 1);
  g->sw = attr(attrs.strides, 1, 1);
  g->padT = attr(attrs.pads, 0, 0);
  g->padL = attr(attrs.pads, 1, 0);
  g->padB = attr(attrs.pads, 2, 0);
  g->padR = attr(attrs.pads, 3, 0);
  g->dh = attr(attrs.dilations, 0, 1);
  g->dw = attr(attrs.dilations, 1, 1);
  if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->padT < 0 || g->padL < 0 || g->padB < 0 || g->padR < 0) {
    return fail(error, "strides and dilations must be >= 1 and pads >= 0");
  }
  return true;
}

/** Output extent along one axis: floor form, or ceil form when `ceil`. */
int64_t windowCount(int64_t in, int64_t padBegin, int64_t padEnd, int64_t kernel, int64_t stride, int64_t dilation,
                    bool ceil) {
  const int64_t span = in + padBegin + padEnd - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  return (ceil ? (span + stride - 1) / stride : span / stride) + 1;
}

}  // namespace

bool planConv(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
              const OpAttrs& attrs, ConvGeometry* g, std::string* error) {
  if (x.size() != 4 || w.size() != 4 || y.size() != 4) {
    return fail(error, "Conv needs X [N,C,H,W], W [M,C/group,kH,kW] and Y [N,M,oH,oW]; got X " + shapeString(x) +
                           ", W " + shapeString(w) + ", Y " + shapeString(y));
  }
  ConvGeometry c;
  c.n = x[0];
  c.c = x[1];
  c.h = x[2];
  c.w = x[3];
  c.m = w[0];
  c.kh = w[2];
  c.kw = w[3];
  c.group = attrs.group;
  if (c.group < 1 || c.c % c.group != 0 || c.m % c.group != 0 || w[1] != c.c / c.group) {
    return fail(error, "group " + std::to_string(attrs.group) + " does not fit X " + shapeString(x) + " and W " +
                           shapeString(w));
  }
  if (!attrs.kernelShape.empty() &&
      (attr(attrs.kernelShape, 0, c.kh) != c.kh || attr(attrs.kernelShape, 1, c.kw) != c.kw)) {
    return fail(error, "kernel_shape differs from W " + shapeString(w));
  }
  if (!windowAttrs(attrs, &c, error)) return false;
  c.oh = windowCount(c.h, c.padT, c.padB, c.kh, c.sh, c.dh, false);
  c.ow = windowCount(c.w, c.padL, c.padR, c.kw, c.sw, c.dw, false);
  if (y[0] != c.n || y[1] != c.m || y[2] != c.oh || y[3] != c.ow) {
    return fail(error, "output " + shapeString(y) + " differs from the expected " +
                           shapeString({c.n, c.m, c.oh, c.ow}));
  }
  c.cg = c.c / c.group;
  c.mg = c.m / c.group;
  c.kg = c.cg * c.kh * c.kw;
  *g = c;
  return true;
}

bool planPool(const std::vector<int64_t>& x, const std::vector<int64_t>& y, const OpAttrs& attrs, ConvGeometry* g,
              std::string* error) {
  if (x.size() != 4 || y.size() != 4) {
    return fail(error, "pools need X [N,C,H,W] and Y [N,C,oH,oW]; got X " + shapeString(x) + ", Y " + shapeString(y));
  }
  if (attrs.kernelShape.size() != 2 || attrs.kernelShape[0] < 1 || attrs.kernelShape[1] < 1) {
    return fail(error, "kernel_shape must be two positive values");
  }
  ConvGeometry c;
  c.n = x[0];
  c.c = x[1];
  c.h = x[2];
  c.w = x[3];
  c.m = c.c;
  c.kh = attrs.kernelShape[0];
  c.kw = attrs.kernelShape[1];
  if (!windowAttrs(attrs, &c, error)) return false;
  const int64_t ohFloor = windowCount(c.h, c.padT, c.padB, c.kh, c.sh, c.dh, false);
  const int64_t owFloor = windowCount(c.w, c.padL, c.padR, c.kw, c.sw, c.dw, false);
  const int64_t ohCeil = windowCount(c.h, c.padT, c.padB, c.kh, c.sh, c.dh, true);
  const int64_t owCeil = windowCount(c.w, c.padL, c.padR, c.kw, c.sw, c.dw, true);
  if (y[0] != c.n || y[1] != c.c || (y[2] != ohFloor && y[2] != ohCeil) || (y[3] != owFloor && y[3] != owCeil)) {
    return fail(error, "output " + shapeString(y) + " differs from the expected " +
                           shapeString({c.n, c.c, ohFloor, owFloor}));
  }
  c.oh = y[2];
  c.ow = y[3];
  c.cg = 1;
  c.mg = 1;
  c.kg = c.kh * c.kw;
  *g = c;
  return true;
}

bool planGather(const std::vector<int64_t>& data, const std::vector<int64_t>& indices, int axis,
                const std::vector<int64_t>& out, GatherGeometry* g, std::string* error) {
  if (axis < 0 || static_cast<size_t>(axis) >= data.size()) {
    return fail(error, "axis " + std::to_string(axis) + " is outside data " + shapeString(data));
  }
  const AxisGeometry a = axisGeometry(data, axis);
  GatherGeometry r;
  r.outer = a.outer;
  r.n = a.len;
  r.inner = a.inner;
  r.count = product(indices);
  if (product(out) != r.outer * r.count * r.inner) {
    return fail(error, "output " + shapeString(out) + " does not hold data " + shapeString(data) +
                           " gathered with indices " + shapeString(indices));
  }
  *g = r;
  return true;
}

}  // namespace gpu
}  // namespace flotilla
