// What the core and the binding know of CUDA. Implemented in native/src/cuda/*.cu when nvcc was found at build time,
// and by native/src/cuda_stub.cc otherwise, so nothing outside native/src/cuda/ depends on CUDA headers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../device.h"
#include "../plan.h"

namespace flotilla {

struct CudaDeviceInfo {
  int id = 0;
  std::string name;
  size_t totalMemory = 0;
  int major = 0;
  int minor = 0;
  int multiProcessors = 0;
};

/** Whether this build has the CUDA path at all. */
bool cudaCompiledIn();

/** CUDA runtime version this build linked (e.g. 13000), 0 without CUDA. */
int cudaRuntimeVersion();

/**
 * The CUDA devices the driver shows; empty when there is none, no driver, or no CUDA in this build, and then
 * `reason` (when given) says which ("built without CUDA", "cudaErrorInsufficientDriver: ...").
 */
std::vector<CudaDeviceInfo> listCudaDevices(std::string* reason);

/** A Device on GPU `id` with its own stream and pinned staging buffers; throws std::runtime_error. */
std::unique_ptr<Device> createCudaDevice(int id);

/**
 * Benchmarks the device GEMM C[M,N] = A[M,K].B[K,N] on device-resident data: returns the mean seconds per product
 * over `iterations` (after a warm-up), timed with CUDA events. Throws std::runtime_error.
 */
double cudaGemmSeconds(int id, int m, int n, int k, Precision precision, int iterations);

}  // namespace flotilla
