#include "session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "cuda/cuda_api.h"

namespace flotilla {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kNoOffset = std::numeric_limits<size_t>::max();

std::string dimsString(const std::vector<int64_t>& dims) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < dims.size(); i++) s << (i ? ", " : "") << dims[i];
  s << ']';
  return s.str();
}

std::string opLabel(const OpDesc& op) { return std::string(opTypeName(op.type)) + " '" + op.name + "'"; }

[[noreturn]] void failOp(const OpDesc& op, const std::string& what) {
  throw std::invalid_argument(opLabel(op) + ": " + what);
}

int64_t product(const std::vector<int64_t>& dims, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < dims.size() && i < to; i++) n *= dims[i];
  return n;
}

/** numpy broadcasting of two shapes; false when they are incompatible. */
bool broadcastShapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t i = 0; i < rank; i++) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}

bool isPermutation(const std::vector<int32_t>& perm, size_t rank) {
  if (perm.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int32_t p : perm) {
    if (p < 0 || static_cast<size_t>(p) >= rank || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

/** Spatial output size of a convolution or pool window; `ceil` rounds the last partial window up. */
int64_t windowOutput(int64_t in, int64_t padBegin, int64_t padEnd, int64_t kernel, int64_t stride, int64_t dilation,
                     bool ceil) {
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t room = in + padBegin + padEnd - span;
  if (room < 0) return 0;
  return (ceil ? (room + stride - 1) / stride : room / stride) + 1;
}

/** Fills attribute defaults the kernels rely on (the planner may leave them empty). */
void normaliseAttrs(OpDesc& op, const Plan& plan) {
  OpAttrs& a = op.attrs;
  switch (op.type) {
    case OpType::Conv:
    case OpType::MaxPool:
    case OpType::AveragePool:
      if (a.strides.empty()) a.strides = {1, 1};
      if (a.pads.empty()) a.pads = {0, 0, 0, 0};
      if (a.dilations.empty()) a.dilations = {1, 1};
      if (op.type == OpType::Conv && a.kernelShape.empty() && op.inputs.size() > 1 && op.inputs[1] >= 0 &&
          static_cast<size_t>(op.inputs[1]) < plan.tensors.size()) {
        const auto& w = plan.tensors[static_cast<size_t>(op.inputs[1])].dims;
        if (w.size() == 4) a.kernelShape = {static_cast<int32_t>(w[2]), static_cast<int32_t>(w[3])};
      }
      break;
    case OpType::Transpose:
      if (a.perm.empty() && !op.inputs.empty() && op.inputs[0] >= 0 &&
          static_cast<size_t>(op.inputs[0]) < plan.tensors.size()) {
        const size_t rank = plan.tensors[static_cast<size_t>(op.inputs[0])].dims.size();
        for (size_t i = 0; i < rank; i++) a.perm.push_back(static_cast<int32_t>(rank - 1 - i));
      }
      break;
    case OpType::Gelu:
      if (a.activation == Activation::None) a.activation = Activation::Gelu;
      break;
    default:
      break;
  }
}

struct Arity {
  size_t minInputs, maxInputs;
  size_t requiredInputs;   // the first ones may not be -1
};

Arity arityOf(OpType t) {
  switch (t) {
    case OpType::MatMul: return {2, 3, 2};
    case OpType::Add: case OpType::Sub: case OpType::Mul: case OpType::Div: return {2, 2, 2};
    case OpType::LayerNorm: return {2, 3, 2};
    case OpType::Gather: return {2, 2, 2};
    case OpType::Concat: return {1, SIZE_MAX, SIZE_MAX};
    case OpType::Conv: return {2, 3, 2};
    default: return {1, 1, 1};
  }
}

/**
 * The output shape an op computes from its input shapes (at one batch), or throws naming what is inconsistent.
 * For the ops whose output shape the plan decides (Reshape, pools' ceil mode) it checks the declared one instead.
 */
void checkShapes(const OpDesc& op, const std::vector<const std::vector<int64_t>*>& in,
                 const std::vector<int64_t>& declared, int64_t batch) {
  const OpAttrs& a = op.attrs;
  auto mismatch = [&](const std::vector<int64_t>& expected) {
    if (expected != declared) {
      failOp(op, "output dims " + dimsString(declared) + " at batch " + std::to_string(batch) + " should be " +
                     dimsString(expected));
    }
  };
  auto axisIn = [&](int64_t rank) {
    if (a.axis < 0 || a.axis >= rank) {
      failOp(op, "axis " + std::to_string(a.axis) + " is out of range for rank " + std::to_string(rank));
    }
  };
  const std::vector<int64_t>& x = *in[0];
  switch (op.type) {
    case OpType::MatMul: {
      const std::vector<int64_t>& b = *in[1];
      if (x.size() < 2 || b.size() < 2) {
        failOp(op, "A " + dimsString(x) + " and B " + dimsString(b) + " must have rank >= 2");
      }
      const size_t ra = x.size(), rb = b.size();
      const int64_t m = a.transA ? x[ra - 1] : x[ra - 2];
      const int64_t k = a.transA ? x[ra - 2] : x[ra - 1];
      const int64_t kb = a.transB ? b[rb - 1] : b[rb - 2];
      const int64_t n = a.transB ? b[rb - 2] : b[rb - 1];
      if (k != kb) {
        failOp(op, "inner dimensions differ: A " + dimsString(x) + (a.transA ? " (transposed)" : "") + " has K=" +
                       std::to_string(k) + ", B " + dimsString(b) + (a.transB ? " (transposed)" : "") + " has K=" +
                       std::to_string(kb));
      }
      std::vector<int64_t> lead;
      const std::vector<int64_t> leadA(x.begin(), x.end() - 2), leadB(b.begin(), b.end() - 2);
      if (!broadcastShapes(leadA, leadB, &lead)) {
        failOp(op, "leading dims of A " + dimsString(x) + " and B " + dimsString(b) + " do not broadcast");
      }
      if (in.size() > 2 && in[2] != nullptr) {
        const std::vector<int64_t>& bias = *in[2];
        const int64_t nb = product(bias);
        const bool rowShaped = bias.empty() || bias.back() == nb;
        if ((nb != n && nb != 1) || !rowShaped || bias.size() > 2) {
          failOp(op, "bias " + dimsString(bias) + " must be [N], [1, N] or a scalar with N=" + std::to_string(n));
        }
      }
      lead.push_back(m);
      lead.push_back(n);
      mismatch(lead);
      return;
    }
    case OpType::Add: case OpType::Sub: case OpType::Mul: case OpType::Div: {
      std::vector<int64_t> out;
      if (!broadcastShapes(x, *in[1], &out)) {
        failOp(op, "inputs " + dimsString(x) + " and " + dimsString(*in[1]) + " do not broadcast");
      }
      mismatch(out);
      return;
    }
    case OpType::Relu: case OpType::LeakyRelu: case OpType::Sigmoid: case OpType::Tanh: case OpType::Erf:
    case OpType::Gelu:
      mismatch(x);
      return;
    case OpType::Softmax:
      axisIn(static_cast<int64_t>(x.size()));
      mismatch(x);
      return;
    case OpType::LayerNorm: {
      axisIn(static_cast<int64_t>(x.size()));
      const int64_t cols = product(x, static_cast<size_t>(a.axis));
      for (size_t i = 1; i < in.size(); i++) {
        if (in[i] != nullptr && product(*in[i]) != cols) {
          failOp(op, std::string(i == 1 ? "scale " : "bias ") + dimsString(*in[i]) + " must have " +
                         std::to_string(cols) + " elements (the dims of " + dimsString(x) + " from axis " +
                         std::to_string(a.axis) + ")");
        }
      }
      mismatch(x);
      return;
    }
    case OpType::Gather: {
      axisIn(static_cast<int64_t>(x.size()));
      std::vector<int64_t> out(x.begin(), x.begin() + a.axis);
      out.insert(out.end(), in[1]->begin(), in[1]->end());
      out.insert(out.end(), x.begin() + a.axis + 1, x.end());
      mismatch(out);
      return;
    }
    case OpType::Reshape:
      if (product(x) != product(declared)) {
        failOp(op, "cannot reshape " + dimsString(x) + " (" + std::to_string(product(x)) + " elements) to " +
                       dimsString(declared) + " (" + std::to_string(product(declared)) + ") at batch " +
                       std::to_string(batch));
      }
      return;
    case OpType::Transpose: {
      if (!isPermutation(a.perm, x.size())) failOp(op, "perm is not a permutation of the input's " +
                                                         std::to_string(x.size()) + " dims");
      std::vector<int64_t> out;
      for (int32_t p : a.perm) out.push_back(x[static_cast<size_t>(p)]);
      mismatch(out);
      return;
    }
    case OpType::Concat: {
      axisIn(static_cast<int64_t>(x.size()));
      std::vector<int64_t> out = x;
      for (size_t i = 1; i < in.size(); i++) {
        const std::vector<int64_t>& y = *in[i];
        bool same = y.size() == x.size();
        for (size_t d = 0; same && d < x.size(); d++) same = d == static_cast<size_t>(a.axis) || y[d] == x[d];
        if (!same) {
          failOp(op, "input " + std::to_string(i) + " " + dimsString(y) + " does not match input 0 " +
                         dimsString(x) + " outside axis " + std::to_string(a.axis));
        }
        out[static_cast<size_t>(a.axis)] += y[static_cast<size_t>(a.axis)];
      }
      mismatch(out);
      return;
    }
    case OpType::Conv: {
      const std::vector<int64_t>& w = *in[1];
      if (x.size() != 4 || w.size() != 4) {
        failOp(op, "X " + dimsString(x) + " and W " + dimsString(w) + " must have rank 4 (2-D NCHW convolution)");
      }
      const int64_t g = a.group;
      if (g < 1 || x[1] % g != 0 || w[0] % g != 0) {
        failOp(op, "group " + std::to_string(g) + " must divide the input channels " + std::to_string(x[1]) +
                       " and the output channels " + std::to_string(w[0]));
      }
      if (w[1] != x[1] / g) {
        failOp(op, "W " + dimsString(w) + " has " + std::to_string(w[1]) + " input channels per group, X " +
                       dimsString(x) + " with group " + std::to_string(g) + " has " + std::to_string(x[1] / g));
      }
      if (a.kernelShape.size() != 2 || a.kernelShape[0] != w[2] || a.kernelShape[1] != w[3]) {
        failOp(op, "kernelShape does not match W " + dimsString(w));
      }
      if (in.size() > 2 && in[2] != nullptr && product(*in[2]) != w[0]) {
        failOp(op, "bias " + dimsString(*in[2]) + " must have " + std::to_string(w[0]) + " elements");
      }
      const int64_t oh = windowOutput(x[2], a.pads[0], a.pads[2], w[2], a.strides[0], a.dilations[0], false);
      const int64_t ow = windowOutput(x[3], a.pads[1], a.pads[3], w[3], a.strides[1], a.dilations[1], false);
      if (oh < 1 || ow < 1) failOp(op, "the kernel does not fit the padded input " + dimsString(x));
      mismatch({x[0], w[0], oh, ow});
      return;
    }
    case OpType::MaxPool:
    case OpType::AveragePool: {
      if (x.size() != 4) failOp(op, "X " + dimsString(x) + " must have rank 4 (NCHW)");
      if (a.kernelShape.size() != 2 || a.kernelShape[0] < 1 || a.kernelShape[1] < 1) {
        failOp(op, "kernelShape must be two positive sizes");
      }
      int64_t lo[2], hi[2];
      for (int d = 0; d < 2; d++) {
        lo[d] = windowOutput(x[static_cast<size_t>(2 + d)], a.pads[static_cast<size_t>(d)],
                             a.pads[static_cast<size_t>(d + 2)], a.kernelShape[static_cast<size_t>(d)],
                             a.strides[static_cast<size_t>(d)], a.dilations[static_cast<size_t>(d)], false);
        hi[d] = windowOutput(x[static_cast<size_t>(2 + d)], a.pads[static_cast<size_t>(d)],
                             a.pads[static_cast<size_t>(d + 2)], a.kernelShape[static_cast<size_t>(d)],
                             a.strides[static_cast<size_t>(d)], a.dilations[static_cast<size_t>(d)], true);
      }
      const bool ok = declared.size() == 4 && declared[0] == x[0] && declared[1] == x[1] && declared[2] >= 1 &&
                      declared[3] >= 1 && declared[2] >= lo[0] && declared[2] <= hi[0] && declared[3] >= lo[1] &&
                      declared[3] <= hi[1];
      if (!ok) {
        failOp(op, "output dims " + dimsString(declared) + " at batch " + std::to_string(batch) + " should be " +
                       dimsString({x[0], x[1], lo[0], lo[1]}) +
                       (lo[0] != hi[0] || lo[1] != hi[1] ? " (or " + dimsString({x[0], x[1], hi[0], hi[1]}) +
                                                               " with ceil_mode)"
                                                         : std::string()));
      }
      return;
    }
    case OpType::GlobalAveragePool: {
      if (x.size() < 3) failOp(op, "X " + dimsString(x) + " must have rank >= 3 (N, C, spatial...)");
      std::vector<int64_t> out = {x[0], x[1]};
      out.resize(x.size(), 1);
      mismatch(out);
      return;
    }
    case OpType::Count:
      break;
  }
  failOp(op, "unknown op type");
}

void checkAttrs(const OpDesc& op) {
  const OpAttrs& a = op.attrs;
  if (op.type == OpType::Conv || op.type == OpType::MaxPool || op.type == OpType::AveragePool) {
    if (a.strides.size() != 2 || a.strides[0] < 1 || a.strides[1] < 1) failOp(op, "strides must be two sizes >= 1");
    if (a.dilations.size() != 2 || a.dilations[0] < 1 || a.dilations[1] < 1) {
      failOp(op, "dilations must be two sizes >= 1");
    }
    if (a.pads.size() != 4 || *std::min_element(a.pads.begin(), a.pads.end()) < 0) {
      failOp(op, "pads must be four sizes >= 0 [top, left, bottom, right]");
    }
  }
  const int32_t act = static_cast<int32_t>(a.activation);
  if (act < static_cast<int32_t>(Activation::None) || act > static_cast<int32_t>(Activation::GeluTanh)) {
    failOp(op, "unknown activation " + std::to_string(act));
  }
  if (op.type == OpType::Gelu && a.activation != Activation::Gelu && a.activation != Activation::GeluTanh) {
    failOp(op, "activation must be gelu or gelu_tanh");
  }
}

/** Whether an error message already names the op (a device may name it itself). */
bool namesOp(const std::string& what, const OpDesc& op) {
  return !op.name.empty() && what.find("'" + op.name + "'") != std::string::npos;
}

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

Session::Session(Plan plan, const SessionOptions& options) : plan_(std::move(plan)), options_(options) {
  for (OpDesc& op : plan_.ops) normaliseAttrs(op, plan_);
  validate();

  const size_t count = plan_.tensors.size();
  isConstant_.resize(count);
  for (size_t i = 0; i < count; i++) isConstant_[i] = plan_.tensors[i].isConstant();
  constants_.assign(count, nullptr);

  device_ = options_.device < 0 ? createCpuDevice(options_.threads) : createCudaDevice(options_.device);
  deviceName_ = device_->name();
  try {
    for (size_t i = 0; i < count; i++) {
      if (!isConstant_[i]) continue;
      const TensorDesc& t = plan_.tensors[i];
      constants_[i] = device_->allocate(t.data.size());
      device_->copyIn(constants_[i], t.data.data(), t.data.size());
    }
    layOutArena();
    arena_ = device_->allocate(std::max<size_t>(arenaBytes_, kAlign));
    states_.reserve(plan_.ops.size());
    for (const OpDesc& op : plan_.ops) {
      std::vector<const TensorDesc*> inputs;
      for (int32_t idx : op.inputs) inputs.push_back(idx < 0 ? nullptr : &plan_.tensors[static_cast<size_t>(idx)]);
      try {
        states_.push_back(device_->prepare(op, inputs, options_.precision));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(opLabel(op) + ": " + e.what());
      } catch (const std::bad_alloc&) {
        throw;
      } catch (const std::exception& e) {
        const std::string what = e.what();
        if (namesOp(what, op)) throw;
        throw std::runtime_error(opLabel(op) + ": " + what);
      }
    }
    device_->synchronize();
  } catch (...) {
    states_.clear();
    for (void*& p : constants_) {
      if (p != nullptr) device_->release(p);
      p = nullptr;
    }
    if (arena_ != nullptr) device_->release(arena_);
    arena_ = nullptr;
    throw;
  }
  // The device has the weights (and the ops their packed forms): the host copies go.
  for (size_t i = 0; i < count; i++) {
    if (isConstant_[i]) std::vector<uint8_t>().swap(plan_.tensors[i].data);
  }
  cache_.resize(static_cast<size_t>(std::max<int32_t>(plan_.maxBatch, 0)) + 1);
  // FLOTILLA_NATIVE_PROFILE=1: time every op (synchronising the device after each) and print the mean per op when
  // the session closes. A developer's tool: it slows runs down.
  const char* profile = std::getenv("FLOTILLA_NATIVE_PROFILE");
  if (profile != nullptr && *profile != '\0' && std::strcmp(profile, "0") != 0) {
    profile_.assign(plan_.ops.size(), 0.0);
    profiledRuns_.assign(cache_.size(), 0);
  }
}

Session::~Session() {
  printProfile();
  states_.clear();
  for (void* p : constants_) {
    if (p != nullptr) device_->release(p);
  }
  if (arena_ != nullptr) device_->release(arena_);
}

void Session::validate() const {
  const Plan& p = plan_;
  const size_t count = p.tensors.size();
  if (p.maxBatch < 0) throw std::invalid_argument("maxBatch " + std::to_string(p.maxBatch) + " is negative");
  for (const TensorDesc& t : p.tensors) {
    // Element counts must fit comfortably (no int64 wrap-around in any index computation): at most 2^40 bytes.
    int64_t bytes = static_cast<int64_t>(dtypeSize(t.dtype));
    for (int64_t d : t.dims) {
      int64_t r = d;
      const bool wraps = d < 0 && __builtin_mul_overflow(-d, std::max<int64_t>(p.maxBatch, 1), &r);
      if (wraps || r > (int64_t{1} << 40) || __builtin_mul_overflow(bytes, r, &bytes) || bytes > (int64_t{1} << 40)) {
        throw std::invalid_argument("tensor '" + t.name + "' " + dimsString(t.dims) + " is too large at batch " +
                                    std::to_string(p.maxBatch));
      }
    }
    for (int64_t d : t.dims) {
      if (d < 0 && p.maxBatch == 0) {
        throw std::invalid_argument("tensor '" + t.name + "' has a batch dim " + dimsString(t.dims) +
                                    " but the plan's maxBatch is 0 (it does not batch)");
      }
    }
    if (t.isConstant()) {
      for (int64_t d : t.dims) {
        if (d < 0) throw std::invalid_argument("constant '" + t.name + "' has a batch dim " + dimsString(t.dims));
      }
      const size_t expected = static_cast<size_t>(product(t.dims)) * dtypeSize(t.dtype);
      if (t.data.size() != expected) {
        throw std::invalid_argument("constant '" + t.name + "' " + dimsString(t.dims) + " " + dtypeName(t.dtype) +
                                    " has " + std::to_string(t.data.size()) + " bytes of data, expected " +
                                    std::to_string(expected));
      }
    }
  }
  std::vector<bool> defined(count, false);
  for (size_t i = 0; i < count; i++) defined[i] = p.tensors[i].isConstant();
  for (int32_t idx : p.inputs) {
    if (idx < 0 || static_cast<size_t>(idx) >= count) {
      throw std::invalid_argument("graph input index " + std::to_string(idx) + " is out of range (" +
                                  std::to_string(count) + " tensors)");
    }
    const TensorDesc& t = p.tensors[static_cast<size_t>(idx)];
    if (t.isConstant()) throw std::invalid_argument("graph input '" + t.name + "' is a constant");
    if (defined[static_cast<size_t>(idx)]) throw std::invalid_argument("graph input '" + t.name + "' is listed twice");
    defined[static_cast<size_t>(idx)] = true;
  }
  const std::vector<int64_t> batches =
      p.maxBatch == 0 ? std::vector<int64_t>{0} : std::vector<int64_t>{1, static_cast<int64_t>(p.maxBatch)};
  for (const OpDesc& op : p.ops) {
    if (static_cast<int32_t>(op.type) < 0 || op.type >= OpType::Count) {
      throw std::invalid_argument("op '" + op.name + "' has an unknown type " +
                                  std::to_string(static_cast<int32_t>(op.type)));
    }
    const Arity arity = arityOf(op.type);
    if (op.inputs.size() < arity.minInputs || op.inputs.size() > arity.maxInputs) {
      failOp(op, "takes " + std::to_string(arity.minInputs) +
                     (arity.maxInputs == arity.minInputs ? std::string()
                      : arity.maxInputs == SIZE_MAX       ? std::string(" or more")
                                                          : " to " + std::to_string(arity.maxInputs)) +
                     " inputs, got " + std::to_string(op.inputs.size()));
    }
    if (op.outputs.size() != 1) failOp(op, "must have one output, got " + std::to_string(op.outputs.size()));
    for (size_t i = 0; i < op.inputs.size(); i++) {
      const int32_t idx = op.inputs[i];
      if (idx == -1 && i >= arity.requiredInputs) continue;
      if (idx < 0 || static_cast<size_t>(idx) >= count) {
        failOp(op, "input " + std::to_string(i) + " is tensor " + std::to_string(idx) + ", out of range (" +
                       std::to_string(count) + " tensors)");
      }
      if (!defined[static_cast<size_t>(idx)]) {
        failOp(op, "input " + std::to_string(i) + " '" + p.tensors[static_cast<size_t>(idx)].name +
                       "' is used before any op computes it");
      }
    }
    const int32_t out = op.outputs[0];
    if (out < 0 || static_cast<size_t>(out) >= count) {
      failOp(op, "output is tensor " + std::to_string(out) + ", out of range");
    }
    const TensorDesc& y = p.tensors[static_cast<size_t>(out)];
    if (defined[static_cast<size_t>(out)]) {
      failOp(op, "output '" + y.name + "' is already defined (a constant, a graph input or an earlier op's output)");
    }
    checkAttrs(op);

    // dtypes
    auto dtypeOf = [&](size_t i) { return p.tensors[static_cast<size_t>(op.inputs[i])].dtype; };
    auto requireF32 = [&](size_t i, const char* what) {
      if (op.inputs[i] >= 0 && dtypeOf(i) != DType::F32) {
        failOp(op, std::string(what) + " must be float32, got " + dtypeName(dtypeOf(i)));
      }
    };
    switch (op.type) {
      case OpType::Gather:
        if (dtypeOf(1) != DType::I32 && dtypeOf(1) != DType::I64) {
          failOp(op, std::string("indices must be int32 or int64, got ") + dtypeName(dtypeOf(1)));
        }
        if (y.dtype != dtypeOf(0)) failOp(op, "output dtype must be the data's");
        break;
      case OpType::Reshape:
      case OpType::Transpose:
      case OpType::Concat:
        for (size_t i = 0; i < op.inputs.size(); i++) {
          if (dtypeOf(i) != y.dtype) {
            failOp(op, "input " + std::to_string(i) + " is " + dtypeName(dtypeOf(i)) + " but the output is " +
                           dtypeName(y.dtype));
          }
        }
        break;
      default:
        for (size_t i = 0; i < op.inputs.size(); i++) requireF32(i, ("input " + std::to_string(i)).c_str());
        if (y.dtype != DType::F32) failOp(op, std::string("output must be float32, got ") + dtypeName(y.dtype));
        break;
    }

    // shapes at the smallest and the largest batch
    for (int64_t b : batches) {
      std::vector<std::vector<int64_t>> shapes(op.inputs.size());
      std::vector<const std::vector<int64_t>*> in(op.inputs.size(), nullptr);
      for (size_t i = 0; i < op.inputs.size(); i++) {
        if (op.inputs[i] < 0) continue;
        shapes[i] = shapeAt(op.inputs[i], b);
        in[i] = &shapes[i];
      }
      checkShapes(op, in, shapeAt(out, b), b);
    }
    defined[static_cast<size_t>(out)] = true;
  }
  for (int32_t idx : p.outputs) {
    if (idx < 0 || static_cast<size_t>(idx) >= count) {
      throw std::invalid_argument("graph output index " + std::to_string(idx) + " is out of range");
    }
    if (!defined[static_cast<size_t>(idx)]) {
      throw std::invalid_argument("graph output '" + p.tensors[static_cast<size_t>(idx)].name +
                                  "' is never computed");
    }
  }
}

std::vector<int64_t> Session::shapeAt(int32_t index, int64_t batch) const {
  const std::vector<int64_t>& dims = plan_.tensors[static_cast<size_t>(index)].dims;
  std::vector<int64_t> shape(dims.size());
  for (size_t i = 0; i < dims.size(); i++) shape[i] = resolveDim(dims[i], batch);
  return shape;
}

void Session::layOutArena() {
  const size_t count = plan_.tensors.size();
  const int64_t nOps = static_cast<int64_t>(plan_.ops.size());
  storage_.resize(count);
  for (size_t i = 0; i < count; i++) storage_[i] = static_cast<int32_t>(i);
  // A Reshape's output shares its input's storage (the bytes are the same, row-major).
  for (const OpDesc& op : plan_.ops) {
    if (op.type == OpType::Reshape) {
      storage_[static_cast<size_t>(op.outputs[0])] = storage_[static_cast<size_t>(op.inputs[0])];
    }
  }
  // Live interval of each storage root, inclusive, in op indices: graph inputs from before the first op, graph
  // outputs to after the last.
  std::vector<int64_t> first(count, std::numeric_limits<int64_t>::max()), last(count, -2);
  auto touch = [&](int32_t tensor, int64_t at) {
    const size_t root = static_cast<size_t>(storage_[static_cast<size_t>(tensor)]);
    first[root] = std::min(first[root], at);
    last[root] = std::max(last[root], at);
  };
  for (int32_t idx : plan_.inputs) touch(idx, -1);
  for (int64_t i = 0; i < nOps; i++) {
    const OpDesc& op = plan_.ops[static_cast<size_t>(i)];
    for (int32_t idx : op.inputs) {
      if (idx >= 0) touch(idx, i);
    }
    for (int32_t idx : op.outputs) touch(idx, i);
  }
  for (int32_t idx : plan_.outputs) touch(idx, nOps);

  const int64_t sizingBatch = std::max<int64_t>(plan_.maxBatch, 0);
  struct Block {
    size_t root, bytes;
    int64_t first, last;
    size_t offset;
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < count; i++) {
    if (storage_[i] != static_cast<int32_t>(i) || isConstant_[i] || last[i] < -1) continue;
    const TensorDesc& t = plan_.tensors[i];
    const size_t bytes =
        static_cast<size_t>(product(shapeAt(static_cast<int32_t>(i), sizingBatch))) * dtypeSize(t.dtype);
    blocks.push_back({i, roundUp(std::max<size_t>(bytes, 1), kAlign), first[i], last[i], 0});
  }
  // Greedy by size: the largest blocks first, each at the best-fitting gap among the blocks it is live with.
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return blocks[x].bytes != blocks[y].bytes ? blocks[x].bytes > blocks[y].bytes : blocks[x].first < blocks[y].first;
  });
  std::vector<size_t> placed;
  arenaBytes_ = 0;
  for (size_t bi : order) {
    Block& b = blocks[bi];
    std::vector<std::pair<size_t, size_t>> busy;   // [offset, end) of live neighbours
    for (size_t pi : placed) {
      const Block& o = blocks[pi];
      if (o.first <= b.last && b.first <= o.last) busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t best = kNoOffset, bestGap = kNoOffset, cursor = 0;
    for (const auto& [start, end] : busy) {
      if (start >= cursor && start - cursor >= b.bytes && start - cursor < bestGap) {
        best = cursor;
        bestGap = start - cursor;
      }
      cursor = std::max(cursor, end);
    }
    b.offset = best != kNoOffset ? best : cursor;
    arenaBytes_ = std::max(arenaBytes_, b.offset + b.bytes);
    placed.push_back(bi);
  }
  offsets_.assign(count, kNoOffset);
  for (const Block& b : blocks) offsets_[b.root] = b.offset;
}

void* Session::tensorData(int32_t index) const {
  const size_t root = static_cast<size_t>(storage_[static_cast<size_t>(index)]);
  if (isConstant_[root]) return constants_[root];
  return static_cast<uint8_t*>(arena_) + offsets_[root];
}

void Session::checkBatch(int batch) const {
  if (plan_.maxBatch == 0) {
    if (batch != 0) {
      throw std::invalid_argument("batch " + std::to_string(batch) +
                                  " is out of range: this model does not batch (its max batch size is 0), run it "
                                  "with batch 0");
    }
    return;
  }
  if (batch < 1 || batch > plan_.maxBatch) {
    throw std::invalid_argument("batch " + std::to_string(batch) + " is out of range [1, " +
                                std::to_string(plan_.maxBatch) + "]");
  }
}

int64_t Session::inputElements(size_t i, int batch) const { return product(shapeAt(plan_.inputs[i], batch)); }

int64_t Session::outputElements(size_t i, int batch) const { return product(shapeAt(plan_.outputs[i], batch)); }

const Session::Resolved& Session::resolved(int batch) {
  std::unique_ptr<Resolved>& slot = cache_[static_cast<size_t>(batch)];
  if (slot) return *slot;
  auto r = std::make_unique<Resolved>();
  auto ref = [&](int32_t idx) {
    TensorRef t;
    if (idx < 0) return t;
    t.data = tensorData(idx);
    t.dtype = plan_.tensors[static_cast<size_t>(idx)].dtype;
    t.shape = shapeAt(idx, batch);
    return t;
  };
  for (const OpDesc& op : plan_.ops) {
    std::vector<TensorRef> ins, outs;
    for (int32_t idx : op.inputs) ins.push_back(ref(idx));
    for (int32_t idx : op.outputs) outs.push_back(ref(idx));
    r->opInputs.push_back(std::move(ins));
    r->opOutputs.push_back(std::move(outs));
  }
  for (int32_t idx : plan_.inputs) {
    r->inputBytes.push_back(static_cast<size_t>(product(shapeAt(idx, batch))) *
                            dtypeSize(plan_.tensors[static_cast<size_t>(idx)].dtype));
  }
  for (int32_t idx : plan_.outputs) {
    r->outputBytes.push_back(static_cast<size_t>(product(shapeAt(idx, batch))) *
                             dtypeSize(plan_.tensors[static_cast<size_t>(idx)].dtype));
  }
  std::vector<bool> isInput(plan_.tensors.size(), false);
  for (int32_t idx : plan_.inputs) isInput[static_cast<size_t>(idx)] = true;
  for (size_t i = 0; i < plan_.tensors.size(); i++) {
    if (offsets_[i] == kNoOffset || isInput[i] || plan_.tensors[i].dtype != DType::F32) continue;
    r->poison.emplace_back(static_cast<float*>(tensorData(static_cast<int32_t>(i))),
                           static_cast<size_t>(product(shapeAt(static_cast<int32_t>(i), batch))));
  }
  slot = std::move(r);
  return *slot;
}

void Session::run(const std::vector<const void*>& hostInputs, int batch, const std::vector<void*>& hostOutputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  checkBatch(batch);
  if (hostInputs.size() != plan_.inputs.size() || hostOutputs.size() != plan_.outputs.size()) {
    throw std::invalid_argument("the plan has " + std::to_string(plan_.inputs.size()) + " inputs and " +
                                std::to_string(plan_.outputs.size()) + " outputs, the run gave " +
                                std::to_string(hostInputs.size()) + " and " + std::to_string(hostOutputs.size()));
  }
  if (arena_ == nullptr) throw std::runtime_error("the session is closed");
  const Resolved& r = resolved(batch);
  if (options_.poison) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const auto& [ptr, n] : r.poison) device_->fill(ptr, nan, n);
    for (size_t i = 0; i < hostOutputs.size(); i++) {
      if (output(i).dtype == DType::F32) {
        std::fill_n(static_cast<float*>(hostOutputs[i]), r.outputBytes[i] / sizeof(float), nan);
      }
    }
  }
  for (size_t i = 0; i < hostInputs.size(); i++) {
    if (r.inputBytes[i] > 0) device_->copyIn(tensorData(plan_.inputs[i]), hostInputs[i], r.inputBytes[i]);
  }
  const bool profiling = !profile_.empty();
  for (size_t i = 0; i < plan_.ops.size(); i++) {
    const OpDesc& op = plan_.ops[i];
    try {
      const auto start = profiling ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      device_->run(op, states_[i].get(), r.opInputs[i], r.opOutputs[i]);
      if (profiling) {
        device_->synchronize();
        profile_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      if (namesOp(what, op)) throw;
      throw std::invalid_argument(opLabel(op) + ": " + what);
    } catch (const std::bad_alloc&) {
      throw std::runtime_error(opLabel(op) + ": out of memory");
    } catch (const std::exception& e) {
      const std::string what = e.what();
      if (namesOp(what, op)) throw;
      throw std::runtime_error(opLabel(op) + ": " + what);
    }
  }
  for (size_t i = 0; i < hostOutputs.size(); i++) {
    if (r.outputBytes[i] > 0) device_->copyOut(hostOutputs[i], tensorData(plan_.outputs[i]), r.outputBytes[i]);
  }
  device_->synchronize();
  if (profiling) profiledRuns_[static_cast<size_t>(batch)]++;
}

void Session::printProfile() const {
  int64_t runs = 0;
  for (int64_t n : profiledRuns_) runs += n;
  if (runs == 0) return;
  double total = 0;
  for (double t : profile_) total += t;
  std::fprintf(stderr, "flotilla native profile: %lld runs on %s, %.1f us of ops a run\n", static_cast<long long>(runs),
               device_->name().c_str(), total / static_cast<double>(runs) * 1e6);
  for (size_t i = 0; i < plan_.ops.size(); i++) {
    std::fprintf(stderr, "  %8.1f us %5.1f%%  %s\n", profile_[i] / static_cast<double>(runs) * 1e6,
                 total > 0 ? 100.0 * profile_[i] / total : 0.0, opLabel(plan_.ops[i]).c_str());
  }
}

}  // namespace flotilla
