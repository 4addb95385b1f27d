# The native module. Sources are found, not listed: every src/*.cc (scripts/list-sources.cjs), plus src/cuda/*.cu
# compiled by nvcc when scripts/find-nvcc.cjs finds one (scripts/build.cjs decides; FLOTILLA_NATIVE_CUDA=0 forces
# CPU-only), or src/cuda_stub.cc, which answers "built without CUDA", when it does not.
# No -march: the module must run on any x86-64 with AVX2; the SGEMM and the element-wise loops pick AVX-512/AVX2 code
# at run time. No -ffast-math: NaN poisoning and erf's accuracy rely on IEEE arithmetic.
{
  "variables": {
    "nvcc%": "<!(node scripts/find-nvcc.cjs)",
  },
  "targets": [
    {
      "target_name": "flotilla_native",
      "sources": [
        "binding/addon.cc",
        "<!@(node scripts/list-sources.cjs src .cc --exclude cuda_stub.cc)",
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "src",
      ],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NAPI_CPP_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-O3", "-fPIC", "-fopenmp-simd"],
      "ldflags": ["-pthread"],
      "conditions": [
        ["nvcc==''", {
          "defines": ["HAVE_CUDA=0"],
          "sources": ["<!@(node scripts/list-sources.cjs src .cc --only cuda_stub.cc)"],
        }, {
          "variables": { "cuda_home%": "<!(node scripts/cuda-home.cjs <(nvcc))" },
          "defines": ["HAVE_CUDA=1"],
          "sources": ["<!@(node scripts/list-sources.cjs src/cuda .cu)"],
          "include_dirs": ["<(cuda_home)/include"],
          "libraries": [
            "-L<(cuda_home)/lib64",
            "-lcudart_static", "-ldl", "-lrt", "-lpthread",
            "-Wl,--exclude-libs,libcudart_static.a",
          ],
          "rules": [{
            "rule_name": "nvcc",
            "extension": "cu",
            "inputs": ["<(RULE_INPUT_PATH)"],
            "outputs": ["<(INTERMEDIATE_DIR)/<(RULE_INPUT_ROOT).cu.o"],
            "message": "NVCC <(RULE_INPUT_PATH)",
            "process_outputs_as_sources": 1,
            "action": [
              "<(nvcc)", "-c", "<@(_inputs)", "-o", "<@(_outputs)",
              "-O3", "-std=c++17", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
              "-DHAVE_CUDA=1", "-Isrc",
              "-gencode", "arch=compute_80,code=sm_80",
              "-gencode", "arch=compute_90,code=sm_90",
              "-gencode", "arch=compute_90,code=compute_90",
            ],
          }],
        }],
      ],
    },
  ],
}
