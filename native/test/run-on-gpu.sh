#!/usr/bin/env bash
# Checks and measures the CUDA path on a GPU machine, where there is no Node (run it there with the device `run`
# tool from the repository root: `bash native/test/run-on-gpu.sh`). Needs nvcc and g++; uses python3 + torch when
# they are there.
#
#   1. builds native/test/cuda_test.cc with native/src/cuda/*.cu (nvcc) and runs it with --bench: the host checks,
#      every op on the GPU against references, and GEMM timings for fp32/fp16/bf16 at 256..4096;
#   2. builds native/test/kernels_test.cc with the whole engine (native/test/build.sh when Node is there to run it,
#      the same build done here otherwise) and runs it: every op and example plan on the CPU and on cuda:0;
#   3. times torch.matmul at the same shapes and dtypes (fp32 without TF32, as our SGEMM), torch.cuda.synchronize()
#      around the timed loop;
#   4. prints a table, then, as the last line, one JSON object with every figure.
#
# Objects go to native/build/gpu-test/. Exit status: 0 when both test programs passed.
set -uo pipefail

native="$(cd "$(dirname "$0")/.." && pwd)"
cd "$native"
out="build/gpu-test"
mkdir -p "$out/obj"
jobs="$(nproc 2>/dev/null || echo 4)"

nvcc="${NVCC:-}"
[ -z "$nvcc" ] && nvcc="$(command -v nvcc 2>/dev/null || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  echo "run-on-gpu: nvcc not found (set NVCC)"
  echo '{"error":"nvcc not found"}'
  exit 1
fi
cuda_home="${CUDA_PATH:-$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)}"
[ -f "$cuda_home/include/cuda_runtime.h" ] || cuda_home=/usr/local/cuda
echo "run-on-gpu: nvcc $nvcc ($("$nvcc" --version | tail -n 2 | head -n 1)), CUDA at $cuda_home, $jobs jobs"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader

nvccflags=(-O3 -std=c++17 -Xcompiler -fPIC --expt-relaxed-constexpr -DHAVE_CUDA=1 -Isrc
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90)
cxxflags=(-std=c++17 -O2 -fPIC -fopenmp-simd -pthread -Isrc -DHAVE_CUDA=1)
culibs=(-L"$cuda_home/lib64" -lcudart_static -ldl -lrt -lpthread)

# compile OBJECT COMMAND...: runs in the background, at most $jobs at a time.
pids=()
failed=0
compile() {
  "${@:2}" -o "$1" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
}
wait_all() {
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  pids=()
}

# ---- 1. cuda_test --------------------------------------------------------------------------------------------------
started=$(date +%s)
cu_objects=()
for src in src/cuda/*.cu; do
  o="$out/obj/$(basename "$src").o"
  cu_objects+=("$o")
  compile "$o" "$nvcc" "${nvccflags[@]}" -c "$src"
done
compile "$out/obj/cuda_test.o" "$nvcc" "${nvccflags[@]}" -x cu -c test/cuda_test.cc
wait_all
cuda_test_status="build failed"
bench_lines=""
if [ "$failed" -eq 0 ] && "$nvcc" -o "$out/cuda_test" "$out/obj/cuda_test.o" "${cu_objects[@]}" "${culibs[@]}"; then
  echo "run-on-gpu: cuda_test built in $(( $(date +%s) - started )) s"
  "$out/cuda_test" --bench 2>&1 | tee "$out/cuda_test.log"
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then cuda_test_status="pass"; else cuda_test_status="fail"; fi
  bench_lines="$(grep '^BENCH ' "$out/cuda_test.log" || true)"
else
  echo "run-on-gpu: cuda_test did not build"
fi
cuda_test_summary="$(grep '^cuda_test: ' "$out/cuda_test.log" 2>/dev/null | tail -n 1 | sed 's/^cuda_test: //')"

# ---- 2. kernels_test -----------------------------------------------------------------------------------------------
kernels_test_status="not built"
kernels_test=""
if [ -f test/kernels_test.cc ]; then
  started=$(date +%s)
  if command -v node >/dev/null && [ -f test/build.sh ]; then
    bash test/build.sh && kernels_test="build/test/kernels_test"
  else
    failed=0
    objects=()
    for src in src/*.cc test/kernels_test.cc; do
      [ "$(basename "$src")" = cuda_stub.cc ] && continue
      o="$out/obj/$(basename "$src").o"
      objects+=("$o")
      compile "$o" g++ "${cxxflags[@]}" -c "$src"
    done
    wait_all
    if [ "$failed" -eq 0 ] && g++ "${objects[@]}" "${cu_objects[@]}" -o "$out/kernels_test" -pthread "${culibs[@]}"; then
      kernels_test="$out/kernels_test"
      echo "run-on-gpu: kernels_test built in $(( $(date +%s) - started )) s"
    fi
  fi
  if [ -n "$kernels_test" ]; then
    "$kernels_test" 2>&1 | tee "$out/kernels_test.log"
    if [ "${PIPESTATUS[0]}" -eq 0 ]; then kernels_test_status="pass"; else kernels_test_status="fail"; fi
  else
    kernels_test_status="build failed"
  fi
fi

# ---- 3. torch ------------------------------------------------------------------------------------------------------
torch_lines=""
if command -v python3 >/dev/null && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch_lines="$(python3 - <<'PY'
import torch
torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32, as our SGEMM computes it
torch.backends.cudnn.allow_tf32 = False
for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
    for size in (256, 512, 1024, 2048, 4096):
        iterations = 50 if size <= 1024 else 10
        a = torch.rand(size, size, device="cuda", dtype=dtype) * 2 - 1
        b = torch.rand(size, size, device="cuda", dtype=dtype) * 2 - 1
        torch.matmul(a, b)
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            torch.matmul(a, b)
        stop.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(stop) / 1000.0 / iterations
        print(f"TORCH {name} {size} {seconds:.9f} {2.0 * size ** 3 / seconds / 1e9:.1f}", flush=True)
print(f"TORCHVERSION {torch.__version__} cuda {torch.version.cuda}")
PY
)"
  echo "$torch_lines"
else
  echo "run-on-gpu: no python3 with a CUDA torch: no PyTorch comparison"
fi

# ---- 4. summary ----------------------------------------------------------------------------------------------------
device="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
echo
printf '%-6s %6s %12s %12s %8s\n' dtype size ours_GFLOPs torch_GFLOPs ratio
json_gemm=""
for prec in fp32 fp16 bf16; do
  entries=""
  for size in 256 512 1024 2048 4096; do
    ours="$(echo "$bench_lines" | awk -v p="$prec" -v s="$size" '$2 == p && $3 == s { print $5 }')"
    theirs="$(echo "$torch_lines" | awk -v p="$prec" -v s="$size" '$1 == "TORCH" && $2 == p && $3 == s { print $5 }')"
    ratio=""
    if [ -n "$ours" ] && [ -n "$theirs" ]; then ratio="$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.3f", a / b }')"; fi
    printf '%-6s %6s %12s %12s %8s\n' "$prec" "$size" "${ours:--}" "${theirs:--}" "${ratio:--}"
    entry="\"$size\":{\"gflops\":${ours:-null},\"torch_gflops\":${theirs:-null},\"ratio\":${ratio:-null}}"
    entries="${entries:+$entries,}$entry"
  done
  json_gemm="${json_gemm:+$json_gemm,}\"$prec\":{$entries}"
done
torch_version="$(echo "$torch_lines" | awk '$1 == "TORCHVERSION" { print $2 }')"
echo "{\"device\":\"${device}\",\"cuda_test\":\"$cuda_test_status\",\"cuda_test_summary\":\"$cuda_test_summary\",\"kernels_test\":\"$kernels_test_status\",\"torch\":\"${torch_version:-none}\",\"gemm\":{$json_gemm}}"
[ "$cuda_test_status" = pass ] && { [ "$kernels_test_status" = pass ] || [ "$kernels_test_status" = "not built" ]; }
