#!/bin/sh
# bench/tp.sh — tensor parallelism on this CPU: `--tp N` (each rank THREADS / N threads) against
# `--tp 1` (THREADS threads), pp512 and tg128 under --fast, ROUNDS rounds that alternate which goes
# first (bench/ab.sh with the same build on both sides), beside llama-bench on the same GGUF at the
# same threads, then what the ranks move per step. Not a test.
#
#   sh bench/tp.sh [ROUNDS] [THREADS] [N]      (default 6 rounds, 2 threads, --tp 2)
#   GGUF=FILE another model (default: the default model's Q4_1 file)
set -eu
R=${1:-6} T=${2:-2} N=${3:-2}
. bench/common.sh
AB_RAD=${AB_RAD:-tp.rad}
export AB_RAD
ARGS_B="--tp $N" sh bench/ab.sh build build "$R" "$T"
# what crosses between ranks: two all-reduces a layer (after attention's o and the MLP's down) and
# one after the vocabulary-parallel embedding, each rows x n_embd f32 that every rank writes into
# every other's buffer (ref_comm.c's generic form), and the head's all_gather of n_vocab floats a row
build/rad-info --json "build/$AB_RAD" | python3 -c '
import json, sys
m = json.load(sys.stdin)["model"]
L, d, V, n = m["n_layers"], m["n_embd"], m["n_vocab"], '"$N"'
per_row = (2 * L + 1) * d * 4
print("tp: A = --tp 1 (%s threads), B = --tp %d (%s threads shared out); all-reduces: (2 x %d layers + 1) x %d floats = "
      "%.1f KB a row a rank, %.1f KB a decode step over %d ranks, %.1f MB a 512-row prefill; all_gather: %d floats "
      "(%.1f KB) a logits row" % ("'"$T"'", n, "'"$T"'", L, d, per_row / 1e3, per_row * n / 1e3, n, per_row * n * 512 / 1e6,
                                  V, V * 4 / 1e3))'
build/radiance --model "build/$AB_RAD" --tp "$N" --debug-placement 2>/dev/null | grep -E "^(tensor|rank|weights)" || true
