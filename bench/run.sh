#!/bin/sh
# bench/run.sh — radiance beside llama.cpp on the same GGUF and threads, in one run:
# prompt processing of 512 tokens (pp512) and generation of 128 tokens (tg128), tokens/s, plus
# the machine's read bandwidth and the generation bound it implies. Not a test.
#
#   sh bench/run.sh [THREADS]        (default 2; results go in docs/BENCHMARKS.md by hand)
#
# llama.cpp is built from the llama-cpp-python source package on PyPI (its vendored llama.cpp)
# into build/llama.cpp, once; LLAMA_BENCH=/path/to/llama-bench uses another build.
set -eu
T=${1:-2}
. bench/common.sh
bench_container
LLAMA_BENCH=${LLAMA_BENCH:-$(llama_cpp_tool llama-bench)}

cc -O2 -march=native -pthread -o "$B/membw" bench/membw.c
BW0=$("$B/membw" "$T" 1024 2>/dev/null)

# radiance: a 512-token prompt of fixed ids (pp512), and apart 128 tokens generated after a
# one-token prompt (tg128: llama-bench's tg128 starts from an empty context; after 512 tokens
# the KV reads add about a quarter to the bytes of a step), best of 3; --fast lets the quantised
# GEMMs quantise activations to q8 as llama.cpp does (the same arithmetic class)
ids=$(awk 'BEGIN { s = 1; for (i = 0; i < 512; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), 100 + s % 40000 } }')
best_pp=0 best_tg=0
for r in 1 2 3; do
    line=$(build/radiance --model "$RAD" --ids "$ids" -n 1 --temp 0 --threads "$T" --fast --print-ids 2>&1 >/dev/null | grep 'tok/s' || true)
    pp=$(echo "$line" | sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
    line=$(build/radiance --model "$RAD" --ids "${ids%%,*}" -n 128 --temp 0 --threads "$T" --fast --ignore-eos --print-ids 2>&1 >/dev/null | grep 'tok/s' || true)
    tg=$(echo "$line" | sed -n 's/.*generation [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
    best_pp=$(echo "$best_pp $pp" | awk '{ print ($2 > $1) ? $2 : $1 }')
    best_tg=$(echo "$best_tg $tg" | awk '{ print ($2 > $1) ? $2 : $1 }')
done

# llama.cpp: llama-bench's own pp512 / tg128 (its average over repetitions)
"$LLAMA_BENCH" -m "$GGUF" -p 512 -n 128 -t "$T" -r 3 -o csv > "$B/llama-bench.csv" 2>/dev/null
l_pp=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
               { gsub(/"/, ""); if ($c["n_prompt"] == 512 && $c["n_gen"] == 0) print $c["avg_ts"] }' "$B/llama-bench.csv")
l_tg=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
               { gsub(/"/, ""); if ($c["n_prompt"] == 0 && $c["n_gen"] == 128) print $c["avg_ts"] }' "$B/llama-bench.csv")

# the bandwidth again after the runs: a shared machine's moves, and the bound takes the higher
BW1=$("$B/membw" "$T" 1024 2>/dev/null)
BW=$(echo "$BW0 $BW1" | awk '{ print ($2 > $1) ? $2 : $1 }')

# bytes a generated token reads: every weight but the embedding table (one row is gathered)
# (a tied head has no output.weight: logits_gemm then reads the whole embedding, which counts)
read_bytes=$(build/rad-info --json --tensors "$RAD" | jq '([.tensors[].name] | index("output.weight")) as $head
    | [.tensors[] | select(.name != "tok_embd.weight" or $head == null) | .bytes] | add')
bound=$(echo "$BW $read_bytes" | awk '{ printf "%.1f", $1 * 1e9 / $2 }')

# paired: the bandwidth and a tg128 one right after the other, five times; each pair's share of
# its own bound, and the median (a shared VM's bandwidth moves from one minute to the next, so a
# bound measured minutes away from the run it divides is off by as much)
pairs=""
for r in 1 2 3 4 5; do
    bw=$("$B/membw" "$T" 512 2>/dev/null)
    line=$(build/radiance --model "$RAD" --ids "${ids%%,*}" -n 128 --temp 0 --threads "$T" --fast --ignore-eos --print-ids 2>&1 >/dev/null | grep 'tok/s' || true)
    tg=$(echo "$line" | sed -n 's/.*generation [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p')
    pairs="$pairs $(echo "$tg $read_bytes $bw" | awk '{ printf "%.3f", $1 * $2 / ($3 * 1e9) }')"
done
paired=$(echo "$pairs" | tr ' ' '\n' | grep . | sort -n | awk '{ v[NR] = $1 } END { printf "median %.0f%% (%.0f%% to %.0f%%)", 100 * v[int((NR + 1) / 2)], 100 * v[1], 100 * v[NR] }')

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
printf '\n%s, %s threads, %s GB/s read bandwidth (bench/membw.c: %s before the runs, %s after; the higher), %s\n\n' \
    "$cpu" "$T" "$BW" "$BW0" "$BW1" "$(date -u +%Y-%m-%d)"
printf '| test | radiance tok/s | llama.cpp tok/s | radiance / llama.cpp |\n|---|---|---|---|\n'
printf '| pp512 | %s | %s | %s |\n' "$best_pp" "$l_pp" "$(echo "$best_pp $l_pp" | awk '{ printf "%.2f", $1 / $2 }')"
printf '| tg128 | %s | %s | %s |\n' "$best_tg" "$l_tg" "$(echo "$best_tg $l_tg" | awk '{ printf "%.2f", $1 / $2 }')"
printf '\ngeneration bound: %s GB/s / %s bytes per token = %s tok/s; radiance at %s of it, llama.cpp at %s\n' \
    "$BW" "$read_bytes" "$bound" "$(echo "$best_tg $bound" | awk '{ printf "%.0f%%", 100 * $1 / $2 }')" \
    "$(echo "$l_tg $bound" | awk '{ printf "%.0f%%", 100 * $1 / $2 }')"
printf 'paired (membw, then tg128, five times): radiance at %s of the bound measured just before\n' "$paired"
