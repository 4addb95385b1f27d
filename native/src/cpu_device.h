// The CPU device: host memory (64-byte aligned), memcpy copies, and the kernels of cpu_kernels.h on a thread pool
// (the process-wide one, or the session's own when it asks for a thread count).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "thread_pool.h"

namespace flotilla {

class CpuDevice final : public Device {
 public:
  /** threads <= 0: the process-wide pool (defaultThreadPool); otherwise a pool of this many threads of its own. */
  explicit CpuDevice(int threads);
  std::string name() const override { return "cpu"; }
  void* allocate(size_t bytes) override;
  void release(void* ptr) noexcept override;
  void copyIn(void* dst, const void* hostSrc, size_t bytes) override;
  void copyOut(void* hostDst, const void* src, size_t bytes) override;
  void fill(float* dst, float value, size_t count) override;
  std::unique_ptr<OpState> prepare(const OpDesc& op, const std::vector<const TensorDesc*>& inputs,
                                   Precision precision) override;
  void run(const OpDesc& op, OpState* state, const std::vector<TensorRef>& inputs,
           const std::vector<TensorRef>& outputs) override;
  void synchronize() override {}
  ThreadPool* pool() const { return pool_; }

 private:
  std::unique_ptr<ThreadPool> ownPool_;
  ThreadPool* pool_;
};

}  // namespace flotilla
