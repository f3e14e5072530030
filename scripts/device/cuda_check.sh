#!/usr/bin/env bash
# The GPU check of the model module, run ON THE GPU MACHINE from the repository
# root, after scripts/device/prepare.sh ran on the development machine (carry
# [".device"]). Needs python3 with torch (2.x, CUDA), transformers,
# safetensors and numpy, plus CMake, ninja and a C++ compiler; no Abseil,
# yaml-cpp, gRPC or protobuf, no network. Everything lands in $OUT as JSON:
#   (a) build.json        tests/device built against the python torch
#                         (find_package(Torch); on failure, include/library
#                         paths from torch.utils.cpp_extension)
#   (b) model_cuda_check.json  incremental == full forward per arch on CUDA
#                         (float32 <= 1e-4, bfloat16 reported), and decode /
#                         prefill / training tokens/s of the ~18M Llama in bf16
#   (c) hf_compare.json   HF transformers loads loom's model directories and
#                         agrees with `loom logprobs` (float32, <= 1e-4 on CPU)
#   summary.json          the three verdicts
# Exit status 0 only if all three pass. Budget: a few minutes on 16 cores.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.device/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
export PYTHONUNBUFFERED=1

read -r TORCH_VERSION CXX_STD TORCH_PREFIX LIBDIR ABI < <("$PY" - <<'PYEOF'
import torch, torch.utils.cpp_extension as ext
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
print(torch.__version__, 20 if v >= (2, 12) else 17, torch.utils.cmake_prefix_path,
      ext.library_paths()[0], int(torch._C._GLIBCXX_USE_CXX11_ABI))
PYEOF
)
echo "torch $TORCH_VERSION (C++$CXX_STD, ABI $ABI), libs in $LIBDIR"
EXTRA=$PWD/.device/deps/include
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CXX_STANDARD="$CXX_STD"
        -DLOOM_EXTRA_INCLUDE="$EXTRA")

# (a) Build. First the CMake way (Torch_DIR); if torch's CMake config cannot
# be used here (CUDA toolkit detection, nvtx, ...), the paths python reports.
# Fresh build folders: a carried CMakeCache from another machine is refused.
rm -rf .device/build .device/build-py
BUILD=.device/build
build_mode=find_package
start=$(date +%s)
# LOOM_DEVICE_BUILD=python_paths skips straight to the fallback.
if [[ ${LOOM_DEVICE_BUILD:-} == python_paths ]] ||
   ! { cmake -S tests/device -B "$BUILD" "${COMMON[@]}" -DTorch_DIR="$TORCH_PREFIX/Torch" \
         -DTORCH_CUDA_ARCH_LIST=9.0 && cmake --build "$BUILD" -j "$JOBS"; } > "$OUT/build_find_package.log" 2>&1; then
  build_mode=python_paths
  BUILD=.device/build-py
  INCS=$("$PY" -c 'import torch.utils.cpp_extension as e; print(";".join(e.include_paths()))')
  LIBS="$LIBDIR/libtorch.so;$LIBDIR/libtorch_cpu.so;$LIBDIR/libc10.so"
  for lib in libtorch_cuda.so libc10_cuda.so; do
    [[ -f $LIBDIR/$lib ]] && LIBS="$LIBS;$LIBDIR/$lib"
  done
  cmake -S tests/device -B "$BUILD" "${COMMON[@]}" -DLOOM_TORCH_FROM_PYTHON=ON \
    -DLOOM_TORCH_INCLUDES="$INCS" -DLOOM_TORCH_LIBS="$LIBS" \
    -DLOOM_TORCH_DEFINES="_GLIBCXX_USE_CXX11_ABI=$ABI" > "$OUT/build_python_paths.log" 2>&1 &&
    cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build_python_paths.log" 2>&1 || build_mode=failed
fi
build_s=$(( $(date +%s) - start ))
echo "{\"mode\": \"$build_mode\", \"seconds\": $build_s, \"torch\": \"$TORCH_VERSION\", \"cxx_standard\": $CXX_STD}" > "$OUT/build.json"
cat "$OUT/build.json"

# (b) The driver.
check=failed
if [[ $build_mode != failed ]]; then
  LD_LIBRARY_PATH="$LIBDIR:${LD_LIBRARY_PATH:-}" timeout 240 "$BUILD/model_cuda_check" \
    --out "$OUT/model_cuda_check.json" > "$OUT/model_cuda_check.log" 2>&1 && check=ok
  tail -n 30 "$OUT/model_cuda_check.log"
else
  tail -n 40 "$OUT"/build_*.log
fi

# (c) Hugging Face transformers against loom's log-probs.
hf=failed
if [[ -d .device/models ]]; then
  timeout 240 "$PY" scripts/device/hf_compare.py --models .device/models \
    --out "$OUT/hf_compare.json" > "$OUT/hf_compare.log" 2>&1 && hf=ok
  tail -n 40 "$OUT/hf_compare.log"
else
  echo "no .device/models: run scripts/device/prepare.sh here and carry .device" >&2
fi

echo "{\"build\": \"$build_mode\", \"model_cuda_check\": \"$check\", \"hf_compare\": \"$hf\"}" | tee "$OUT/summary.json"
[[ $build_mode != failed && $check == ok && $hf == ok ]]
