#!/bin/sh
# bench/families.sh — bench/vs-llama.sh on every family's real GGUF that `make models` fetched
# (Gemma 3 270M, Qwen2.5-Coder 0.5B and 1.5B, all Q4_K_M) and on the default model, one after
# the other in one run: pp512 and tg128 at THREADS, radiance --fast beside llama-bench, paired
# medians and ranges, and each model's generation bound. Not a test.
#
#   sh bench/families.sh [ROUNDS] [THREADS]     (default 5 rounds, 2 threads)
set -eu
N=${1:-5} T=${2:-2}
make -s tools >/dev/null
for g in models/gemma-3-270m-q4_k_m.gguf models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
         models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf models/SmolLM2-135M-Instruct.Q4_1.gguf; do
    if [ ! -f "$g" ]; then echo "families: $g not fetched (make models): skipped"; continue; fi
    sh bench/vs-llama.sh "$g" "$N" "$T"
    echo
done
