// Where a session's ops run. The session (session.h) owns the plan, the shapes and the arena layout; a Device owns
// memory and kernels. CpuDevice (cpu_device.h) is always built; the CUDA device (cuda/cuda_api.h) when nvcc was found.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan.h"

namespace flotilla {

/** A tensor as an op sees it during one run: device memory and the dims resolved for that run's batch. */
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  float* f32() const { return static_cast<float*>(data); }
};

/** What a device keeps per op between runs (packed weights, converted weights, descriptors). */
class OpState {
 public:
  virtual ~OpState() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  /** "cpu" or "cuda:<id>", for messages. */
  virtual std::string name() const = 0;
  /** Device memory, aligned to at least 64 bytes; throws std::bad_alloc or std::runtime_error. */
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
  /** Host -> device and device -> host copies; the CUDA device stages through pinned buffers on its stream. */
  virtual void copyIn(void* dst, const void* hostSrc, size_t bytes) = 0;
  virtual void copyOut(void* hostDst, const void* src, size_t bytes) = 0;
  /** Fills `count` fp32 elements (test poisoning: NaN before each run so an element no kernel wrote is caught). */
  virtual void fill(float* dst, float value, size_t count) = 0;
  /**
   * Called once per op when a session is created, with the op's input descriptions (constants carry their data):
   * a device may keep packed or converted weights. May return null.
   */
  virtual std::unique_ptr<OpState> prepare(const OpDesc& op, const std::vector<const TensorDesc*>& inputs,
                                           Precision precision) = 0;
  /**
   * Runs one op. `inputs[i].data` is null for an absent optional input. Bad data (an index out of range) throws
   * std::invalid_argument (the request's fault: a 400), any other failure std::runtime_error; never crashes.
   */
  virtual void run(const OpDesc& op, OpState* state, const std::vector<TensorRef>& inputs,
                   const std::vector<TensorRef>& outputs) = 0;
  /** Waits for everything queued (a no-op on the CPU). */
  virtual void synchronize() = 0;
};

std::unique_ptr<Device> createCpuDevice(int threads);

}  // namespace flotilla
