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

llama_cpp_tool() {
    bin=$(ls build/llama.cpp/*/vendor/llama.cpp/build/bin/"$1" 2>/dev/null | head -1 || true)
    if [ -n "$bin" ]; then echo "$bin"; return 0; fi
    src=$(ls -d build/llama.cpp/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1 || true)
    if [ -z "$src" ]; then
        echo "bench: building llama.cpp from llama-cpp-python's source package (minutes)" >&2
        mkdir -p build/llama.cpp
        python3 -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python -d build/llama.cpp >&2
        tar -C build/llama.cpp -xzf build/llama.cpp/llama_cpp_python-*.tar.gz
        src=$(ls -d build/llama.cpp/llama_cpp_python-*/vendor/llama.cpp | head -1)
    fi
    [ -f "$src/build/CMakeCache.txt" ] ||
        cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
              -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$src/build" -j"$(nproc)" --target "$1" >/dev/null
    echo "$src/build/bin/$1"
}
