// A compiled plan: validated once, its constants on the device, its intermediate tensors laid out in one arena sized
// for the largest batch, and per-op device state (packed weights). run() executes it for one batch; runs on one
// session are serialised, sessions are independent of each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device.h"
#include "plan.h"

namespace flotilla {

struct SessionOptions {
  /** -1: the CPU; otherwise a CUDA device id. */
  int device = -1;
  Precision precision = Precision::F32;
  /** Fill every fp32 arena tensor and every output with NaN before each run, so an element no kernel wrote shows. */
  bool poison = false;
  /** CPU threads for this session's kernels; <= 0: the process-wide pool. */
  int threads = 0;
};

class Session {
 public:
  /**
   * Validates the plan (throws std::invalid_argument naming the op or tensor and what is wrong), creates the device,
   * uploads the constants, lays out and allocates the arena and prepares every op.
   */
  Session(Plan plan, const SessionOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /**
   * Runs the plan for `batch` items: copies each input in (one copy), runs the ops, copies the outputs out. The host
   * buffers hold exactly inputElements(i, batch) / outputElements(i, batch) elements of the tensor's dtype. Throws
   * std::invalid_argument for bad data (batch out of range, an index out of range: the request's fault) and other
   * exceptions for everything else; every message names the op.
   */
  void run(const std::vector<const void*>& hostInputs, int batch, const std::vector<void*>& hostOutputs);

  /** Throws std::invalid_argument unless `batch` is one run() accepts (1..maxBatch, or 0 when maxBatch is 0). */
  void checkBatch(int batch) const;

  const Plan& plan() const { return plan_; }
  int32_t maxBatch() const { return plan_.maxBatch; }
  int device() const { return options_.device; }
  const std::string& deviceName() const { return deviceName_; }
  size_t arenaBytes() const { return arenaBytes_; }
  size_t inputCount() const { return plan_.inputs.size(); }
  size_t outputCount() const { return plan_.outputs.size(); }
  const TensorDesc& input(size_t i) const { return plan_.tensors[static_cast<size_t>(plan_.inputs[i])]; }
  const TensorDesc& output(size_t i) const { return plan_.tensors[static_cast<size_t>(plan_.outputs[i])]; }
  int64_t inputElements(size_t i, int batch) const;
  int64_t outputElements(size_t i, int batch) const;

 private:
  /** Every op's tensors resolved for one batch, built on the first run at that batch and kept. */
  struct Resolved {
    std::vector<std::vector<TensorRef>> opInputs;
    std::vector<std::vector<TensorRef>> opOutputs;
    std::vector<size_t> inputBytes;
    std::vector<size_t> outputBytes;
    /** fp32 arena regions to poison: (pointer, element count). */
    std::vector<std::pair<float*, size_t>> poison;
  };

  void validate() const;
  void layOutArena();
  const Resolved& resolved(int batch);
  void* tensorData(int32_t index) const;
  std::vector<int64_t> shapeAt(int32_t index, int64_t batch) const;

  Plan plan_;
  SessionOptions options_;
  std::unique_ptr<Device> device_;
  std::string deviceName_;
  /** Per tensor: whether it is a constant (the plan's data is dropped once the device has it). */
  std::vector<bool> isConstant_;
  /** Per tensor: the device copy of a constant, or null. */
  std::vector<void*> constants_;
  /** Per tensor: the byte offset in the arena of a computed or fed tensor; SIZE_MAX for constants. */
  std::vector<size_t> offsets_;
  /** Per tensor: the tensor whose storage it uses (itself, or the input of an aliasing Reshape). */
  std::vector<int32_t> storage_;
  void* arena_ = nullptr;
  size_t arenaBytes_ = 0;
  std::vector<std::unique_ptr<OpState>> states_;
  std::vector<std::unique_ptr<Resolved>> cache_;
  std::mutex mutex_;
  /** FLOTILLA_NATIVE_PROFILE: seconds per op summed over runs, and runs per batch; empty when off. */
  std::vector<double> profile_;
  std::vector<int64_t> profiledRuns_;
  void printProfile() const;
};

}  // namespace flotilla
