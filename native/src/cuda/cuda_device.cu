// The CUDA device (cuda_api.h): one per session, owning a non-blocking stream, pinned staging buffers for the
// host copies, a growable scratch buffer (im2col columns, 16-bit operand copies) and the Gather error record.
// Ops are queued on the stream and run() returns without waiting, except Gather, which must read its error record
// before the next op. The class is not thread-safe; the session serialises its runs.
//
// Errors: a bad index is the request's fault (std::invalid_argument); everything else (a shape the kernels cannot
// take, a failed launch or allocation) is std::runtime_error. Messages do not name the op: the session prefixes
// "<Type> '<name>': " itself.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_api.h"
#include "cuda_check.h"
#include "kernels.h"

namespace flotilla {

namespace gpu {
namespace {

/** Host copies above this go through the staging buffer in chunks, so pinned memory stays bounded. */
constexpr size_t kMaxStaging = 64u << 20;
/** im2col column buffers are sized for this many bytes at most (whole images; at least one image). */
constexpr int64_t kMaxColumnBytes = 256ll << 20;
constexpr size_t kScratchAlign = 256;

size_t alignUp(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

/** fp32 -> 16-bit bits on the host, rounding to nearest even (the same conversion the device kernels use). */
uint16_t toHalfBits(float v, Precision p) {
  uint16_t bits;
  if (p == Precision::BF16) {
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    std::memcpy(&bits, &h, sizeof bits);
  } else {
    const __half h = __float2half_rn(v);
    std::memcpy(&bits, &h, sizeof bits);
  }
  return bits;
}

/**
 * What prepare() keeps for a MatMul or Conv in a fp16/bf16 session: the precision, and when the weights are constant
 * their 16-bit copy, padded ([batch][rows][roundUp(cols, 8)], index_math.h paddedSource).
 */
class HalfWeights final : public OpState {
 public:
  HalfWeights(int device, Precision precision) : device_(device), precision_(precision) {}
  ~HalfWeights() override {
    if (data_ != nullptr) {
      // The session frees op states after its last run has been waited for; the sync covers a device shared with
      // other sessions' streams too.
      cudaSetDevice(device_);
      cudaDeviceSynchronize();
      cudaFree(data_);
    }
  }
  HalfWeights(const HalfWeights&) = delete;
  HalfWeights& operator=(const HalfWeights&) = delete;

  Precision precision() const { return precision_; }
  const void* data() const { return data_; }
  bool matches(int64_t batch, int64_t rows, int64_t cols) const {
    return data_ != nullptr && batch == batch_ && rows == rows_ && cols == cols_;
  }

  /** Converts `src` (fp32, [batch] matrices op(X) of [rows, cols], stored transposed when `transposed`). */
  void upload(const float* src, int64_t batch, int64_t rows, int64_t cols, bool transposed, Device& device) {
    const int64_t padded = roundUp(cols, 8);
    const int64_t total = batch * rows * padded;
    std::vector<uint16_t> host(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) {
      const int64_t s = paddedSource(i, rows, cols, padded, transposed, rows * cols);
      host[static_cast<size_t>(i)] = s < 0 ? 0 : toHalfBits(src[s], precision_);
    }
    data_ = device.allocate(host.size() * sizeof(uint16_t));
    device.copyIn(data_, host.data(), host.size() * sizeof(uint16_t));
    batch_ = batch;
    rows_ = rows;
    cols_ = cols;
  }

 private:
  int device_;
  Precision precision_;
  void* data_ = nullptr;
  int64_t batch_ = 0, rows_ = 0, cols_ = 0;
};

}  // namespace

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int id) : id_(id) {
    try {
      use();
      checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      checkCuda(cudaMalloc(reinterpret_cast<void**>(&gatherError_), sizeof(GatherError)), "cudaMalloc (gather record)");
      checkCuda(cudaMemsetAsync(gatherError_, 0, sizeof(GatherError), stream_), "cudaMemsetAsync (gather record)");
      checkCuda(cudaMallocHost(reinterpret_cast<void**>(&gatherErrorHost_), sizeof(GatherError)),
                "cudaMallocHost (gather record)");
      checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    } catch (const std::exception& e) {
      releaseAll();
      throw std::runtime_error(name() + ": " + e.what());
    }
  }

  ~CudaDevice() override { releaseAll(); }

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override { return "cuda:" + std::to_string(id_); }

  void* allocate(size_t bytes) override {
    use();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, kScratchAlign));
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(name() + ": cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaErrorText(e));
    }
    return p;
  }

  void release(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    cudaSetDevice(id_);
    cudaStreamSynchronize(stream_);   // nothing queued may still use it
    cudaFree(ptr);
  }

  void copyIn(void* dst, const void* hostSrc, size_t bytes) override {
    use();
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(hostSrc);
    for (size_t done = 0; done < bytes;) {
      const size_t chunk = std::min(bytes - done, kMaxStaging);
      uint8_t* staged = stage(chunk);
      std::memcpy(staged, s + done, chunk);
      checkCuda(cudaMemcpyAsync(d + done, staged, chunk, cudaMemcpyHostToDevice, stream_),
                name() + ": cudaMemcpyAsync host to device");
      done += chunk;
    }
  }

  void copyOut(void* hostDst, const void* src, size_t bytes) override {
    use();
    auto* d = static_cast<uint8_t*>(hostDst);
    const auto* s = static_cast<const uint8_t*>(src);
    for (size_t done = 0; done < bytes;) {
      const size_t chunk = std::min(bytes - done, kMaxStaging);
      uint8_t* staged = stage(chunk);
      checkCuda(cudaMemcpyAsync(staged, s + done, chunk, cudaMemcpyDeviceToHost, stream_),
                name() + ": cudaMemcpyAsync device to host");
      syncStream("copy to host");
      std::memcpy(d + done, staged, chunk);
      done += chunk;
    }
  }

  void fill(float* dst, float value, size_t count) override {
    use();
    launchFill(dst, value, static_cast<int64_t>(count), stream_);
  }

  std::unique_ptr<OpState> prepare(const OpDesc& op, const std::vector<const TensorDesc*>& inputs,
                                   Precision precision) override {
    if (precision == Precision::F32 || (op.type != OpType::MatMul && op.type != OpType::Conv)) return nullptr;
    use();
    auto state = std::make_unique<HalfWeights>(id_, precision);
    const TensorDesc* w = inputs.size() > 1 ? inputs[1] : nullptr;
    if (w == nullptr || !w->isConstant() || w->dtype != DType::F32) return state;
    const auto* data = reinterpret_cast<const float*>(w->data.data());
    const std::vector<int64_t>& d = w->dims;
    if (op.type == OpType::MatMul) {
      // B as [batch][K][N] (a rank-1 B is a column), converted from its stored layout.
      if (d.empty()) return state;
      const bool column = d.size() == 1;
      const bool transB = op.attrs.transB && !column;
      const int64_t rows = column ? 1 : d[d.size() - 2];
      const int64_t cols = column ? d[0] : d[d.size() - 1];
      const int64_t k = column ? d[0] : (transB ? cols : rows);
      const int64_t n = column ? 1 : (transB ? rows : cols);
      const int64_t batch = column ? 1 : product(d, 0, d.size() - 2);
      if (batch * k * n > 0) state->upload(data, batch, k, n, transB, *this);
    } else if (d.size() == 4 && op.attrs.group >= 1 && d[0] % op.attrs.group == 0) {
      // W [M, C/group, kH, kW] as [group][M/group][C/group*kH*kW].
      const int64_t group = op.attrs.group;
      const int64_t rows = d[0] / group, cols = d[1] * d[2] * d[3];
      if (group * rows * cols > 0) state->upload(data, group, rows, cols, false, *this);
    }
    return state;
  }

  void run(const OpDesc& op, OpState* state, const std::vector<TensorRef>& in,
           const std::vector<TensorRef>& out) override {
    use();
    if (out.empty() || out[0].data == nullptr) throw std::runtime_error("no output tensor");
    const TensorRef& y = out[0];
    const OpAttrs& at = op.attrs;
    switch (op.type) {
      case OpType::MatMul: return matmul(op, dynamic_cast<HalfWeights*>(state), in, y);
      case OpType::Add:
      case OpType::Sub:
      case OpType::Mul:
      case OpType::Div: return binary(op.type, input(in, 0), input(in, 1), y);
      case OpType::Relu: return unary(static_cast<int>(Activation::Relu), 0.0f, input(in, 0), y);
      case OpType::LeakyRelu: return unary(static_cast<int>(Activation::LeakyRelu), at.alpha, input(in, 0), y);
      case OpType::Sigmoid: return unary(static_cast<int>(Activation::Sigmoid), 0.0f, input(in, 0), y);
      case OpType::Tanh: return unary(static_cast<int>(Activation::Tanh), 0.0f, input(in, 0), y);
      case OpType::Erf: return unary(kUnaryErf, 0.0f, input(in, 0), y);
      case OpType::Gelu:
        return unary(static_cast<int>(at.activation == Activation::GeluTanh ? Activation::GeluTanh : Activation::Gelu),
                     0.0f, input(in, 0), y);
      case OpType::Softmax: return softmax(input(in, 0), y, at.axis);
      case OpType::LayerNorm: return layerNorm(input(in, 0), input(in, 1), optional(in, 2), y, at);
      case OpType::Gather: return gather(input(in, 0), input(in, 1), y, at.axis);
      case OpType::Reshape: return reshape(input(in, 0), y);
      case OpType::Transpose: return transpose(input(in, 0), y, at.perm);
      case OpType::Concat: return concat(in, y, at.axis);
      case OpType::Conv: return conv(op, dynamic_cast<HalfWeights*>(state), in, y);
      case OpType::MaxPool:
      case OpType::AveragePool: return pool(op, input(in, 0), y);
      case OpType::GlobalAveragePool: return globalAveragePool(input(in, 0), y);
      case OpType::Count: break;
    }
    throw std::runtime_error("the CUDA device has no kernel for op type " + std::to_string(static_cast<int>(op.type)));
  }

  void synchronize() override {
    use();
    syncStream("synchronize");
  }

 private:
  void use() const { checkCuda(cudaSetDevice(id_), "cudaSetDevice(" + std::to_string(id_) + ")"); }

  void syncStream(const char* what) {
    checkCuda(cudaStreamSynchronize(stream_), name() + ": " + what);
    staged_ = 0;   // every queued copy has read its staging bytes
  }

  /**
   * `bytes` (<= kMaxStaging) of pinned memory no queued copy still reads: the next free part of the staging buffer,
   * or, when it is full, the start of it after waiting for the stream (growing it if needed).
   */
  uint8_t* stage(size_t bytes) {
    if (staged_ + bytes > pinnedBytes_) {
      syncStream("staging");
      if (bytes > pinnedBytes_) {
        const size_t size = std::min(kMaxStaging, std::max({bytes, pinnedBytes_ * 2, size_t{1} << 20}));
        if (pinned_ != nullptr) cudaFreeHost(pinned_);
        pinned_ = nullptr;
        pinnedBytes_ = 0;
        checkCuda(cudaMallocHost(reinterpret_cast<void**>(&pinned_), size),
                  name() + ": cudaMallocHost of " + std::to_string(size) + " bytes");
        pinnedBytes_ = size;
      }
    }
    uint8_t* p = pinned_ + staged_;
    staged_ = std::min(pinnedBytes_, staged_ + alignUp(bytes));
    return p;
  }

  /** Device scratch of at least `bytes`, valid until the next call (which may wait for the stream to grow it). */
  uint8_t* scratch(size_t bytes) {
    if (bytes > scratchBytes_) {
      syncStream("scratch");
      const size_t size = std::max(alignUp(bytes), scratchBytes_ + scratchBytes_ / 2);
      if (scratch_ != nullptr) cudaFree(scratch_);
      scratch_ = nullptr;
      scratchBytes_ = 0;
      checkCuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), size),
                name() + ": cudaMalloc of " + std::to_string(size) + " bytes of scratch");
      scratchBytes_ = size;
    }
    return scratch_;
  }

  void releaseAll() noexcept {
    cudaSetDevice(id_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
    if (gatherError_ != nullptr) cudaFree(gatherError_);
    if (gatherErrorHost_ != nullptr) cudaFreeHost(gatherErrorHost_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    pinned_ = nullptr;
    gatherError_ = nullptr;
    gatherErrorHost_ = nullptr;
    stream_ = nullptr;
  }

  static const TensorRef& input(const std::vector<TensorRef>& in, size_t i) {
    if (i >= in.size() || in[i].data == nullptr) throw std::runtime_error("input " + std::to_string(i) + " is missing");
    return in[i];
  }

  static const TensorRef* optional(const std::vector<TensorRef>& in, size_t i) {
    return i < in.size() && in[i].data != nullptr ? &in[i] : nullptr;
  }

  static void requireF32(const TensorRef& t, const char* what) {
    if (t.dtype != DType::F32) throw std::runtime_error(std::string(what) + " must be float32");
  }

  static void requireSameCount(const TensorRef& x, const TensorRef& y) {
    if (x.numel() != y.numel()) {
      throw std::runtime_error("input " + shapeString(x.shape) + " and output " + shapeString(y.shape) +
                               " differ in size");
    }
  }

  // ---- ops --------------------------------------------------------------------------------------------------

  void binary(OpType type, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
    if (a.dtype != y.dtype || b.dtype != y.dtype) throw std::runtime_error("inputs and output must share a dtype");
    StridedIndex<2> map;
    std::string error;
    if (!makeBroadcast(y.shape, a.shape, b.shape, &map, &error)) throw std::runtime_error(error);
    launchBinary(type, y.dtype, map, a.data, b.data, y.data, y.numel(), stream_);
  }

  void unary(int fn, float alpha, const TensorRef& x, const TensorRef& y) {
    requireF32(x, "X");
    requireF32(y, "Y");
    requireSameCount(x, y);
    launchUnary(fn, alpha, x.f32(), y.f32(), y.numel(), stream_);
  }

  void softmax(const TensorRef& x, const TensorRef& y, int axis) {
    requireF32(x, "X");
    requireSameCount(x, y);
    if (axis < 0 || static_cast<size_t>(axis) >= x.shape.size()) {
      throw std::runtime_error("axis " + std::to_string(axis) + " is outside " + shapeString(x.shape));
    }
    launchSoftmax(axisGeometry(x.shape, axis), x.f32(), y.f32(), stream_);
  }

  void layerNorm(const TensorRef& x, const TensorRef& scale, const TensorRef* bias, const TensorRef& y,
                 const OpAttrs& at) {
    requireF32(x, "X");
    requireF32(scale, "scale");
    requireSameCount(x, y);
    if (at.axis < 0 || static_cast<size_t>(at.axis) > x.shape.size()) {
      throw std::runtime_error("axis " + std::to_string(at.axis) + " is outside " + shapeString(x.shape));
    }
    const int64_t len = product(x.shape, static_cast<size_t>(at.axis));
    const int64_t rows = product(x.shape, 0, static_cast<size_t>(at.axis));
    const int64_t scaleLen = scale.numel();
    const int64_t biasLen = bias ? bias->numel() : 1;
    if (scaleLen < 1 || len % scaleLen != 0 || biasLen < 1 || len % biasLen != 0) {
      throw std::runtime_error("scale and bias must have " + std::to_string(len) + " elements");
    }
    if (bias) requireF32(*bias, "bias");
    launchLayerNorm(rows, len, x.f32(), scale.f32(), scaleLen, bias ? bias->f32() : nullptr, biasLen, at.epsilon,
                    y.f32(), stream_);
  }

  void gather(const TensorRef& data, const TensorRef& indices, const TensorRef& y, int axis) {
    if (indices.dtype == DType::F32) throw std::runtime_error("indices must be int32 or int64");
    if (data.dtype != y.dtype) throw std::runtime_error("data and output must share a dtype");
    GatherGeometry g;
    std::string error;
    if (!planGather(data.shape, indices.shape, axis, y.shape, &g, &error)) throw std::runtime_error(error);
    if (y.numel() == 0) return;
    launchGather(g, dtypeSize(data.dtype), data.data, indices.data, indices.dtype == DType::I64, y.data, gatherError_,
                 stream_);
    checkCuda(cudaMemcpyAsync(gatherErrorHost_, gatherError_, sizeof(GatherError), cudaMemcpyDeviceToHost, stream_),
              "cudaMemcpyAsync (gather record)");
    syncStream("gather");
    if (gatherErrorHost_->flag != 0) {
      const GatherError e = *gatherErrorHost_;
      checkCuda(cudaMemsetAsync(gatherError_, 0, sizeof(GatherError), stream_), "cudaMemsetAsync (gather record)");
      syncStream("gather");
      throw std::invalid_argument("index " + std::to_string(e.index) + " (element " + std::to_string(e.position) +
                                  " of the indices) is out of range [" + std::to_string(-g.n) + ", " +
                                  std::to_string(g.n) + ") for axis " + std::to_string(axis) + " of size " +
                                  std::to_string(g.n));
    }
  }

  void reshape(const TensorRef& x, const TensorRef& y) {
    requireSameCount(x, y);
    if (x.data == y.data) return;
    const size_t bytes = static_cast<size_t>(y.numel()) * dtypeSize(y.dtype);
    if (bytes > 0) {
      checkCuda(cudaMemcpyAsync(y.data, x.data, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (reshape)");
    }
  }

  void transpose(const TensorRef& x, const TensorRef& y, const std::vector<int32_t>& perm) {
    if (x.dtype != y.dtype) throw std::runtime_error("input and output must share a dtype");
    StridedIndex<1> map;
    std::string error;
    if (!makeTranspose(x.shape, perm, y.shape, &map, &error)) throw std::runtime_error(error);
    launchTranspose(map, dtypeSize(y.dtype), x.data, y.data, y.numel(), stream_);
  }

  void concat(const std::vector<TensorRef>& in, const TensorRef& y, int axis) {
    const size_t rank = y.shape.size();
    if (axis < 0 || static_cast<size_t>(axis) >= rank) {
      throw std::runtime_error("axis " + std::to_string(axis) + " is outside " + shapeString(y.shape));
    }
    const size_t a = static_cast<size_t>(axis);
    const int64_t inner = product(y.shape, a + 1);
    const int64_t outWidth = y.shape[a] * inner;
    int64_t offset = 0;
    for (const TensorRef& x : in) {
      bool fits = x.data != nullptr && x.dtype == y.dtype && x.shape.size() == rank;
      for (size_t d = 0; fits && d < rank; ++d) fits = d == a || x.shape[d] == y.shape[d];
      if (!fits || offset + x.shape[a] > y.shape[a]) {
        throw std::runtime_error("input " + shapeString(x.shape) + " does not fit output " + shapeString(y.shape) +
                                 " along axis " + std::to_string(axis));
      }
      const int64_t width = x.shape[a] * inner;
      launchConcatPart(dtypeSize(y.dtype), x.data, y.data, x.numel(), width, outWidth, offset * inner, stream_);
      offset += x.shape[a];
    }
    if (offset != y.shape[a]) {
      throw std::runtime_error("inputs fill " + std::to_string(offset) + " of output " + shapeString(y.shape) +
                               " along axis " + std::to_string(axis));
    }
  }

  void pool(const OpDesc& op, const TensorRef& x, const TensorRef& y) {
    requireF32(x, "X");
    ConvGeometry g;
    std::string error;
    if (!planPool(x.shape, y.shape, op.attrs, &g, &error)) throw std::runtime_error(error);
    launchPool(g, op.type == OpType::MaxPool, op.attrs.countIncludePad, x.f32(), y.f32(), stream_);
  }

  void globalAveragePool(const TensorRef& x, const TensorRef& y) {
    requireF32(x, "X");
    if (x.shape.size() < 3) throw std::runtime_error("X " + shapeString(x.shape) + " must have rank >= 3");
    const int64_t rows = x.shape[0] * x.shape[1];
    if (y.numel() != rows) {
      throw std::runtime_error("output " + shapeString(y.shape) + " must have " + std::to_string(rows) + " elements");
    }
    launchRowMean(rows, product(x.shape, 2), x.f32(), y.f32(), stream_);
  }

  // ---- products ---------------------------------------------------------------------------------------------

  void matmul(const OpDesc& op, const HalfWeights* half, const std::vector<TensorRef>& in, const TensorRef& y) {
    const TensorRef& a = input(in, 0);
    const TensorRef& b = input(in, 1);
    const TensorRef* bias = optional(in, 2);
    requireF32(a, "A");
    requireF32(b, "B");
    requireF32(y, "Y");
    const OpAttrs& at = op.attrs;
    GemmPlan p;
    std::string error;
    if (!planGemm(a.shape, b.shape, y.shape, at.transA, at.transB, &p, &error)) throw std::runtime_error(error);
    if (y.numel() == 0) return;

    GemmEpilogue ep;
    ep.biasScale = at.beta;
    ep.activation = static_cast<int>(at.activation);
    ep.activationAlpha = at.activationAlpha;
    if (bias) {
      requireF32(*bias, "bias");
      if (bias->numel() != p.n && bias->numel() != 1) {
        throw std::runtime_error("bias " + shapeString(bias->shape) + " must have N=" + std::to_string(p.n) +
                                 " elements or one");
      }
      ep.colBias = bias->f32();
      ep.colBiasStep = bias->numel() == p.n ? 1 : 0;
    }

    if (half == nullptr) {
      launchSgemm(matmulArgs(p, a.f32(), b.f32(), y.f32(), at.alpha, ep), p.batch, stream_);
      return;
    }
    // fp16/bf16: A converted per run, B once at prepare when it is a constant. planGemm's transposes are the ones
    // that apply (a rank-1 operand is a row or a column, never transposed).
    const Precision precision = half->precision();
    const int64_t kp = roundUp(p.k, 8), np = roundUp(p.n, 8);
    const int64_t mk = p.m * p.k, kn = p.k * p.n;
    const int64_t batchesA = mk > 0 ? a.numel() / mk : 0;
    const int64_t batchesB = kn > 0 ? b.numel() / kn : 0;
    const bool prepared = half->matches(batchesB, p.k, p.n);
    const size_t bytesA = alignUp(static_cast<size_t>(batchesA * p.m * kp) * 2);
    const size_t bytesB = prepared ? 0 : alignUp(static_cast<size_t>(batchesB * p.k * np) * 2);
    uint8_t* work = scratch(bytesA + bytesB);
    const void* b16 = prepared ? half->data() : work + bytesA;
    launchToHalf(precision, a.f32(), batchesA, p.m, p.k, kp, p.transA, mk, work, stream_);
    if (!prepared) launchToHalf(precision, b.f32(), batchesB, p.k, p.n, np, p.transB, kn, work + bytesA, stream_);
    launchHalfGemm(precision, halfMatmulArgs(p, work, b16, y.f32(), at.alpha, ep), p.batch, stream_);
  }

  void conv(const OpDesc& op, const HalfWeights* half, const std::vector<TensorRef>& in, const TensorRef& y) {
    const TensorRef& x = input(in, 0);
    const TensorRef& w = input(in, 1);
    const TensorRef* bias = optional(in, 2);
    requireF32(x, "X");
    requireF32(w, "W");
    requireF32(y, "Y");
    ConvGeometry g;
    std::string error;
    if (!planConv(x.shape, w.shape, y.shape, op.attrs, &g, &error)) throw std::runtime_error(error);
    if (bias) {
      requireF32(*bias, "bias");
      if (bias->numel() != g.m) throw std::runtime_error("bias must have " + std::to_string(g.m) + " elements");
    }
    if (y.numel() == 0) return;

    GemmEpilogue ep;
    ep.rowBias = bias ? bias->f32() : nullptr;
    ep.activation = static_cast<int>(op.attrs.activation);
    ep.activationAlpha = op.attrs.activationAlpha;

    // Per image and group: Y[n][g] [Mg, oH*oW] = W[g] [Mg, Kg] . B [Kg, oH*oW], B being the image's columns
    // (im2col) or, for a pointwise kernel, X[n][g] itself.
    const int64_t ohw = g.oh * g.ow;
    const bool pointwise = g.pointwise();
    const bool f16 = half != nullptr;
    const int64_t kgp = roundUp(g.kg, 8), ohwp = roundUp(ohw, 8);
    const bool prepared = f16 && half->matches(g.group, g.mg, g.kg);
    const int64_t columnBytes = pointwise ? 0 : g.c * g.kh * g.kw * ohw * 4;
    const int64_t halfBytes = f16 ? g.group * g.kg * ohwp * 2 : 0;
    const int64_t perImage = std::max<int64_t>(columnBytes + halfBytes, 1);
    const int64_t chunk = pointwise && !f16 ? g.n : std::max<int64_t>(1, std::min(g.n, kMaxColumnBytes / perImage));
    const size_t weightBytes = f16 && !prepared ? alignUp(static_cast<size_t>(g.group * g.mg * kgp) * 2) : 0;
    const size_t colBytes = alignUp(static_cast<size_t>(chunk * columnBytes));
    const size_t colHalfBytes = alignUp(static_cast<size_t>(chunk * halfBytes));
    uint8_t* work = weightBytes + colBytes + colHalfBytes > 0 ? scratch(weightBytes + colBytes + colHalfBytes) : nullptr;
    const void* w16 = nullptr;
    if (f16) {
      w16 = prepared ? half->data() : work;
      if (!prepared) {
        launchToHalf(half->precision(), w.f32(), g.group, g.mg, g.kg, kgp, false, g.mg * g.kg, work, stream_);
      }
    }
    float* col = reinterpret_cast<float*>(work + weightBytes);
    void* col16 = work + weightBytes + colBytes;

    for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
      const int64_t images = std::min(chunk, g.n - n0);
      const float* src = x.f32() + n0 * g.c * g.h * g.w;   // B for image n0, group 0
      if (!pointwise) {
        launchIm2col(g, n0, images, x.f32(), col, stream_);
        src = col;
      }
      float* dst = y.f32() + n0 * g.m * ohw;
      if (!f16) {
        launchSgemm(convArgs(g, images, w.f32(), src, dst, ep), images * g.group, stream_);
      } else {
        launchToHalf(half->precision(), src, images * g.group, g.kg, ohw, ohwp, false, g.kg * ohw, col16, stream_);
        launchHalfGemm(half->precision(), halfConvArgs(g, images, w16, col16, dst, ep), images * g.group, stream_);
      }
    }
  }

  int id_;
  cudaStream_t stream_ = nullptr;
  uint8_t* pinned_ = nullptr;
  size_t pinnedBytes_ = 0;
  size_t staged_ = 0;
  uint8_t* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  GatherError* gatherError_ = nullptr;
  GatherError* gatherErrorHost_ = nullptr;
};

}  // namespace gpu

bool cudaCompiledIn() { return true; }

int cudaRuntimeVersion() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return CUDART_VERSION;
  }
  return v;
}

std::vector<CudaDeviceInfo> listCudaDevices(std::string* reason) {
  if (reason) reason->clear();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = gpu::cudaErrorText(e);
    return {};
  }
  std::vector<CudaDeviceInfo> devices;
  for (int id = 0; id < count; ++id) {
    cudaDeviceProp prop{};
    const cudaError_t pe = cudaGetDeviceProperties(&prop, id);
    if (pe != cudaSuccess) {
      cudaGetLastError();
      if (reason) *reason = "device " + std::to_string(id) + ": " + gpu::cudaErrorText(pe);
      continue;
    }
    CudaDeviceInfo info;
    info.id = id;
    info.name = prop.name;
    info.totalMemory = prop.totalGlobalMem;
    info.major = prop.major;
    info.minor = prop.minor;
    info.multiProcessors = prop.multiProcessorCount;
    devices.push_back(info);
  }
  if (devices.empty() && reason && reason->empty()) *reason = "no CUDA device found";
  return devices;
}

std::unique_ptr<Device> createCudaDevice(int id) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("cuda:" + std::to_string(id) + ": " + gpu::cudaErrorText(e));
  }
  if (id < 0 || id >= count) {
    throw std::runtime_error("cuda:" + std::to_string(id) + ": no such device (" + std::to_string(count) +
                             " found)");
  }
  return std::make_unique<gpu::CudaDevice>(id);
}

}  // namespace flotilla
