#!/bin/sh
# bench/serve.sh — radiance's server beside llama.cpp's llama-server on the same GGUF and the same
# cores, in one run: aggregate generated tokens/s and time to first token (p50, p99) at
# concurrency 1, 8 and 32, one table on stdout. Not a test.
#
#   sh bench/serve.sh [THREADS]          (default 2; results go in docs/BENCHMARKS.md by hand)
#
# Env: CONC (1,8,32), MAX_TOKENS (64), ROUNDS (requests per worker at each level, 2; c=1 does 4),
# RAD_FLAGS (extra radiance flags; default --fast, the q8-activation GEMMs, llama.cpp's arithmetic
# class, as bench/run.sh), LLAMA_FLAGS (extra llama-server flags; default --poll 0: its threads
# sleep instead of spinning between steps, without which, sharing 2 cores with the load generator,
# one stream ran at 0.4 tok/s instead of 60), LLAMA_SERVER (a llama-server binary; otherwise it is
# built from the llama-cpp-python source package into build/llama.cpp, as bench/run.sh builds
# llama-bench).
#
# The servers run one after the other, each pinned (taskset) to the same THREADS cores; the load
# generator, bench/serve_load.py (.venv-e2e's python: httpx2 streaming), shares the machine.
# Both get the same requests: fixed prompts of mixed lengths, max_tokens fixed, temperature 0,
# streamed, in a closed loop of CONC workers. llama-server gets one slot per stream (-np 32) and a
# context big enough for every slot (-c 32 x 1024, -kvu off), so it batches too.
set -eu
T=${1:-2}
CONC=${CONC:-1,8,32}
MAX_TOKENS=${MAX_TOKENS:-64}
ROUNDS=${ROUNDS:-2}
RAD_FLAGS=${RAD_FLAGS:---fast}
LLAMA_FLAGS=${LLAMA_FLAGS:---poll 0}
. bench/common.sh
PY=.venv-e2e/bin/python
SLOTS=32
SLOT_CTX=1024
[ -x "$PY" ] || { echo "serve.sh: .venv-e2e missing: run scripts/install-deps.sh" >&2; exit 1; }
bench_container
LLAMA_SERVER=${LLAMA_SERVER:-$(llama_cpp_tool llama-server)}

PIN=""
command -v taskset >/dev/null && [ "$(nproc)" -ge "$T" ] && PIN="taskset -c 0-$((T - 1))"
port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SPID=""
stop_server() {
    [ -n "$SPID" ] || return 0
    kill -TERM "$SPID" 2>/dev/null || true
    i=0; while kill -0 "$SPID" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    kill -KILL "$SPID" 2>/dev/null || true
    wait "$SPID" 2>/dev/null || true
    SPID=""
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM HUP
wait_health() {  # URL LOG
    i=0
    until "$PY" -c 'import sys, urllib.request
try: sys.exit(0 if urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status == 200 else 1)
except Exception: sys.exit(1)' "$1"; do
        kill -0 "$SPID" 2>/dev/null || { tail -20 "$2" >&2; echo "serve.sh: the server died (log $2)" >&2; exit 1; }
        [ $i -lt 1200 ] || { tail -20 "$2" >&2; echo "serve.sh: no /health 200 after 120 s" >&2; exit 1; }
        sleep 0.1; i=$((i + 1))
    done
}
load() {  # URL MODEL OUT
    "$PY" bench/serve_load.py "$1" "$2" --concurrency "$CONC" --max-tokens "$MAX_TOKENS" --rounds "$ROUNDS" > "$3"
}

# radiance
P=$(port)
# shellcheck disable=SC2086  # (RAD_FLAGS and LLAMA_FLAGS are word-split on purpose)
$PIN build/radiance --model "$RAD" --host 127.0.0.1 --port "$P" --threads "$T" --max-seqs "$SLOTS" \
    --ctx "$SLOT_CTX" $RAD_FLAGS >"$B/serve-radiance.log" 2>&1 &
SPID=$!
wait_health "http://127.0.0.1:$P" "$B/serve-radiance.log"
model=$("$PY" -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["data"][0]["id"])' \
        "http://127.0.0.1:$P/v1/models")
echo "serve.sh: radiance ($RAD_FLAGS) on $T threads" >&2
load "http://127.0.0.1:$P" "$model" "$B/serve-radiance.jsonl"
stop_server

# llama.cpp
P=$(port)
$PIN "$LLAMA_SERVER" -m "$GGUF" --host 127.0.0.1 --port "$P" -t "$T" -tb "$T" -np "$SLOTS" \
    -c $((SLOTS * SLOT_CTX)) -no-kvu $LLAMA_FLAGS >"$B/serve-llama.log" 2>&1 &
SPID=$!
wait_health "http://127.0.0.1:$P" "$B/serve-llama.log"
echo "serve.sh: llama-server -np $SLOTS $LLAMA_FLAGS on $T threads" >&2
load "http://127.0.0.1:$P" smollm2 "$B/serve-llama.jsonl"
stop_server

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
printf '\n%s, %s threads, %s UTC; max_tokens %s, temperature 0, streamed; radiance %s, llama-server %s;\nload average at the end: %s\n\n' \
    "$cpu" "$T" "$(date -u '+%Y-%m-%d %H:%M')" "$MAX_TOKENS" "$RAD_FLAGS" "$LLAMA_FLAGS" "$(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$B/serve-radiance.jsonl" "$B/serve-llama.jsonl" <<'EOF'
import json, sys
r = {d["concurrency"]: d for d in map(json.loads, open(sys.argv[1]))}
l = {d["concurrency"]: d for d in map(json.loads, open(sys.argv[2]))}
print("| concurrency | requests | radiance tok/s | llama.cpp tok/s | radiance / llama.cpp | radiance TTFT p50 / p99 ms | llama.cpp TTFT p50 / p99 ms |")
print("|---|---|---|---|---|---|---|")
for c in sorted(r):
    a, b = r[c], l[c]
    print("| %d | %d | %.1f | %.1f | %.2f | %.0f / %.0f | %.0f / %.0f |" % (
        c, a["requests"], a["tok_s"], b["tok_s"], a["tok_s"] / b["tok_s"], a["ttft_p50_ms"], a["ttft_p99_ms"],
        b["ttft_p50_ms"], b["ttft_p99_ms"]))
top = max(r)
a, b = r[top], l[top]
ok = a["tok_s"] >= 2 * b["tok_s"] and a["ttft_p99_ms"] <= b["ttft_p99_ms"]
print("\ntarget at concurrency %d (>= 2x llama.cpp's tokens/s at equal or better p99 TTFT): %s (%.2fx, p99 %.0f vs %.0f ms)"
      % (top, "met" if ok else "NOT met", a["tok_s"] / b["tok_s"], a["ttft_p99_ms"], b["ttft_p99_ms"]))
EOF
