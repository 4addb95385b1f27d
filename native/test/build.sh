#!/usr/bin/env bash
# Builds native/test/kernels_test.cc with the engine's sources into native/build/test/kernels_test (no Node, no
# node-gyp): g++ -O2 for every native/src/*.cc, and when nvcc is found (FLOTILLA_NATIVE_CUDA=0 says no) the
# native/src/cuda/*.cu compiled by nvcc and linked with the static CUDA runtime; src/cuda_stub.cc otherwise. A failed
# CUDA build falls back to CPU-only, as the addon's does. Incremental: objects are rebuilt when a source or a header
# it includes changed. Prints one line saying which mode it built.
set -uo pipefail

native="$(cd "$(dirname "$0")/.." && pwd)"
cd "$native"
out="build/test"
jobs="$(nproc 2>/dev/null || echo 2)"
cxxflags=(-std=c++17 -O2 -fPIC -fopenmp-simd -pthread -Isrc)
nvccflags=(-O3 -std=c++17 -Xcompiler -fPIC --expt-relaxed-constexpr -DHAVE_CUDA=1 -Isrc
  -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90)

# up_to_date OBJECT: the object exists and is newer than everything its .d file lists.
up_to_date() {
  local o="$1" d="$1.d" f
  [ -f "$o" ] && [ -f "$d" ] || return 1
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$d"); do
    [ "$f" -nt "$o" ] && return 1
  done
  return 0
}

# build MODE: compiles and links; returns non-zero on failure.
build() {
  local mode="$1" obj="$out/obj-$1" sources=() objects=() pids=() src o failed=0
  mkdir -p "$obj"
  mapfile -t sources < <(node scripts/list-sources.cjs src .cc --exclude cuda_stub.cc)
  if [ "$mode" = cpu ]; then
    mapfile -t -O "${#sources[@]}" sources < <(node scripts/list-sources.cjs src .cc --only cuda_stub.cc)
  fi
  sources+=(test/kernels_test.cc)
  local define="-DHAVE_CUDA=$([ "$mode" = cuda ] && echo 1 || echo 0)"
  for src in "${sources[@]}"; do
    o="$obj/$(basename "$src").o"
    objects+=("$o")
    up_to_date "$o" && continue
    g++ "${cxxflags[@]}" "$define" -MMD -MF "$o.d" -c "$src" -o "$o" &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$jobs" ]; then
      wait "${pids[0]}" || failed=1
      pids=("${pids[@]:1}")
    fi
  done
  if [ "$mode" = cuda ]; then
    local cu=()
    mapfile -t cu < <(node scripts/list-sources.cjs src/cuda .cu)
    for src in "${cu[@]}"; do
      o="$obj/$(basename "$src").o"
      objects+=("$o")
      up_to_date "$o" && continue
      "$nvcc" "${nvccflags[@]}" -MD -MF "$o.d" -c "$src" -o "$o" &
      pids+=($!)
      if [ "${#pids[@]}" -ge "$jobs" ]; then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
      fi
    done
  fi
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" -eq 0 ] || return 1
  if [ "$mode" = cuda ]; then
    g++ "${objects[@]}" -o "$out/kernels_test" -pthread -L"$cuda_home/lib64" -lcudart_static -ldl -lrt -lpthread
  else
    g++ "${objects[@]}" -o "$out/kernels_test" -pthread
  fi
}

started=$(date +%s)
nvcc=""
why=""
if [ "${FLOTILLA_NATIVE_CUDA:-}" = "0" ]; then
  why="FLOTILLA_NATIVE_CUDA=0"
else
  nvcc="$(node scripts/find-nvcc.cjs)"
  if [ -z "$nvcc" ]; then
    why="nvcc not found"
  elif [ -z "$(node scripts/list-sources.cjs src/cuda .cu)" ]; then
    why="no CUDA sources in native/src/cuda"
  fi
fi
mkdir -p "$out"
if [ -z "$why" ]; then
  cuda_home="$(node scripts/cuda-home.cjs "$nvcc")"
  if build cuda; then
    echo "kernels_test: built with CUDA (nvcc at $nvcc) in $(( $(date +%s) - started )) s: $native/$out/kernels_test"
    exit 0
  fi
  echo "kernels_test: the CUDA build failed (the errors are above); building CPU-only"
  why="the CUDA build failed"
fi
if build cpu; then
  echo "kernels_test: built CPU only ($why) in $(( $(date +%s) - started )) s: $native/$out/kernels_test"
  exit 0
fi
echo "kernels_test: the build failed"
exit 1
