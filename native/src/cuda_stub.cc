// cuda_api.h for builds without nvcc: no devices, and every way into the CUDA path says why.
#if !defined(HAVE_CUDA) || !HAVE_CUDA

#include <stdexcept>
#include <string>

#include "cuda/cuda_api.h"

namespace flotilla {

namespace {
const char* const kReason = "built without CUDA (nvcc was not found when the module was built)";
}

bool cudaCompiledIn() { return false; }

int cudaRuntimeVersion() { return 0; }

std::vector<CudaDeviceInfo> listCudaDevices(std::string* reason) {
  if (reason != nullptr) *reason = kReason;
  return {};
}

std::unique_ptr<Device> createCudaDevice(int id) {
  throw std::runtime_error("cuda:" + std::to_string(id) + ": " + kReason);
}

double cudaGemmSeconds(int, int, int, int, Precision, int) { throw std::runtime_error(kReason); }

}  // namespace flotilla

#endif
