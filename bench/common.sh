# bench/common.sh — what run.sh and serve.sh share; sourced (POSIX sh), after `set -eu`.
#
# bench_container: the tools built, the model fetched, and $RAD (build/bench/<GGUF's name>.rad)
# converted from $GGUF, again when rad-convert is newer than it (a container from an older
# converter may differ). GGUF=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (make models) runs
# run.sh or serve.sh on another model.
# llama_cpp_tool NAME: prints the path of llama.cpp's NAME (llama-bench, llama-server), built
# once into build/llama.cpp from the llama-cpp-python source package on PyPI (its vendored
# llama.cpp, GGML_NATIVE=ON).
GGUF=${GGUF:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
B=build/bench
RAD=$B/$(basename "$GGUF" .gguf).rad

bench_container() {
    mkdir -p "$B"
    make -s tools model >/dev/null
    if [ ! -f "$RAD" ] || [ build/rad-convert -nt "$RAD" ]; then build/rad-convert "$GGUF" -o "$RAD" --force; fi
}

# On a CPU with AMX (amx_int8 in /proc/cpuinfo) GGML_NATIVE compiles ggml's AMX matmul, which in
# this llama.cpp (llama-cpp-python 0.3.36) dies with SIGSEGV on the first batch of more than one
# row (a prompt, a speculative verify): there it is built as native minus AMX, into build-noamx
# (the same AVX-512 VNNI/BF16 paths, GGML_NATIVE=OFF with each ISA option on, AMX off).
LLAMA_BUILD=build LLAMA_ISA="-DGGML_NATIVE=ON"
if grep -q amx_int8 /proc/cpuinfo 2>/dev/null; then
    LLAMA_BUILD=build-noamx
    LLAMA_ISA="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_AVX_VNNI=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
               -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
               -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
fi

llama_cpp_tool() {
    bin=$(ls build/llama.cpp/*/vendor/llama.cpp/$LLAMA_BUILD/bin/"$1" 2>/dev/null | head -1 || true)
    if [ -n "$bin" ]; then echo "$bin"; return 0; fi
    src=$(ls -d build/llama.cpp/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1 || true)
    if [ -z "$src" ]; then
        echo "bench: building llama.cpp from llama-cpp-python's source package (minutes)" >&2
        mkdir -p build/llama.cpp
        python3 -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python -d build/llama.cpp >&2
        tar -C build/llama.cpp -xzf build/llama.cpp/llama_cpp_python-*.tar.gz
        src=$(ls -d build/llama.cpp/llama_cpp_python-*/vendor/llama.cpp | head -1)
    fi
    # shellcheck disable=SC2086
    [ -f "$src/$LLAMA_BUILD/CMakeCache.txt" ] ||
        cmake -S "$src" -B "$src/$LLAMA_BUILD" -DCMAKE_BUILD_TYPE=Release $LLAMA_ISA -DLLAMA_CURL=OFF \
              -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$src/$LLAMA_BUILD" -j"$(nproc)" --target "$1" >/dev/null
    echo "$src/$LLAMA_BUILD/bin/$1"
}
