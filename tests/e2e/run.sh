#!/bin/sh
# tests/e2e/run.sh — the end-to-end suites against a live `radiance` server, with the official
# `openai` Python client (`make test-e2e`; `make test-e2e-san` runs it on the sanitizer build).
#
#   sh tests/e2e/run.sh [BUILD]        BUILD: build (default) or build-san
#   E2E_ONLY='test_api test_load.TestLoad' sh tests/e2e/run.sh     some suites (unittest -k patterns)
#
# 1. converts the default model into BUILD/e2e/smollm2.rad (once);
# 2. starts BUILD/radiance on a free loopback port (--ctx 512 --deterministic --max-seqs 16
#    --max-conns 2048, the soft descriptor limit raised as the systemd unit's LimitNOFILE= does);
# 3. waits for /health 200 (bounded; fails at once, with the server's stderr, if it dies);
# 4. runs tests/e2e/test_*.py with .venv-e2e's python (openai, pinned; scripts/install-deps.sh
#    makes the venv); the suites start a few servers of their own (--api-key, limits, drain);
# 5. stops the server with SIGTERM and checks that it exits 0 within its drain timeout;
# 6. fails on any sanitizer report in any server's stderr (BUILD/e2e/*.log).
# A sanitizer build (BUILD != build, or E2E_QUICK=1) runs the same suites with fewer tokens, and by
# default with the release build's kernel plugins (below; E2E_SAN_KERNELS=san for its own).
set -u
B=${1:-build}
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=$ROOT/.venv-e2e/bin/python
GGUF=models/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=$B/e2e
MODEL=$OUT/smollm2.rad
CTX=512
MAX_SEQS=16
DRAIN=10
QUICK=${E2E_QUICK:-$([ "$B" = build ] && echo 0 || echo 1)}
[ "$QUICK" = 1 ] && { READY_S=300; STOP_S=60; } || { READY_S=120; STOP_S=$((DRAIN + 10)); }

die() { echo "test-e2e: $*" >&2; exit 1; }
[ -x "$PY" ] && "$PY" -c 'import openai, jsonschema' 2>/dev/null ||
    die ".venv-e2e with the openai client and jsonschema is missing: run scripts/install-deps.sh (it creates .venv-e2e)"
[ -x "$B/radiance" ] && [ -x "$B/rad-convert" ] || die "$B/radiance or $B/rad-convert not built (make B=$B tools)"
[ -f "$GGUF" ] || die "$GGUF missing (make model)"
mkdir -p "$OUT" || exit 1
rm -f "$OUT"/*.log

if [ ! -f "$MODEL" ] || [ "$GGUF" -nt "$MODEL" ]; then
    "$B/rad-convert" "$GGUF" -o "$MODEL.tmp" >"$OUT/convert.out" 2>&1 && mv "$MODEL.tmp" "$MODEL" ||
        { cat "$OUT/convert.out"; rm -f "$MODEL.tmp"; die "rad-convert $GGUF failed"; }
fi

# The container `make run` serves (the Makefile's MODEL_SETS: the default model's sampling
# defaults), for test_readme's own server: the README's snippet against what a new user runs.
RUN_MODEL=$OUT/run/smollm2.rad
SETS=$(sed -n 's/^MODEL_SETS *= *//p' Makefile)
[ -n "$SETS" ] || die "no MODEL_SETS line in the Makefile"
mkdir -p "$OUT/run" || exit 1
"$B/rad-convert" "$GGUF" -o "$RUN_MODEL" --force $SETS >"$OUT/convert-run.out" 2>&1 ||
    { cat "$OUT/convert-run.out"; die "rad-convert $GGUF $SETS failed"; }

# The sanitizer build: its server (HTTP layer, scheduler, KV manager, tokenizer, sampler, engine)
# runs with the release build's kernel plugins by default: the sanitized kernels are ~15x slower
# on 2 cores and are checked under ASan by test-san's unit suites. E2E_SAN_KERNELS=san keeps the
# sanitized ones (a slow, deeper run). The copy in $OUT/bin finds plugins/ beside itself.
RAD=$B/radiance
if [ "$QUICK" = 1 ] && [ "${E2E_SAN_KERNELS:-release}" != san ] && [ "$B" != build ] && [ -d build/plugins ]; then
    mkdir -p "$OUT/bin" && cp "$B/radiance" "$OUT/bin/radiance" && ln -sfn "$ROOT/build/plugins" "$OUT/bin/plugins" ||
        die "cannot set up $OUT/bin"
    RAD=$OUT/bin/radiance
    echo "test-e2e: $B/radiance with build/plugins' kernels (E2E_SAN_KERNELS=san: its own)"
fi

# the server holds 1,000+ idle connections in one suite: raise the soft descriptor limit
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 65536 ]; then ulimit -n 65536; else ulimit -n "$hard"; fi

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOG=$OUT/server.log
"$RAD" --model "$MODEL" --host 127.0.0.1 --port "$PORT" --ctx "$CTX" --threads 2 --deterministic \
    --max-seqs "$MAX_SEQS" --max-conns 2048 --drain-timeout "$DRAIN" >"$LOG" 2>&1 &
PID=$!
cleanup() {
    if kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; fi
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM HUP

health() {
    "$PY" -c 'import sys, urllib.request
try: sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception: sys.exit(1)' "http://127.0.0.1:$PORT/health"
}
t=0
until health; do
    if ! kill -0 "$PID" 2>/dev/null; then
        wait "$PID"; rc=$?
        tail -20 "$LOG" >&2
        die "the server exited ($rc) before /health said 200 (log: $LOG)"
    fi
    [ "$t" -ge $((READY_S * 5)) ] && { tail -20 "$LOG" >&2; die "/health not 200 after $READY_S s (log: $LOG)"; }
    sleep 0.2; t=$((t + 1))
done
echo "test-e2e: $RAD serving on 127.0.0.1:$PORT (pid $PID, quick=$QUICK)"

set -f  # E2E_ONLY's patterns may hold '*'
ONLY=""
for k in ${E2E_ONLY:-}; do ONLY="$ONLY -k $k"; done
start=$(date +%s)
E2E_URL=http://127.0.0.1:$PORT E2E_SERVER_PID=$PID E2E_SERVER_LOG=$LOG E2E_BIN=$RAD \
E2E_MODEL_FILE=$MODEL E2E_RUN_MODEL_FILE=$RUN_MODEL E2E_CTX=$CTX E2E_MAX_SEQS=$MAX_SEQS E2E_QUICK=$QUICK E2E_LOGDIR=$OUT \
PYTHONPATH=tests/e2e PYTHONDONTWRITEBYTECODE=1 \
    "$PY" -m unittest discover -v -s tests/e2e -p 'test_*.py' $ONLY 2>&1
rc=$?
set +f
echo "test-e2e: suites took $(( $(date +%s) - start )) s"

# SIGTERM: the server drains (nothing is in flight now) and exits 0 within the drain timeout
if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    t=0
    while kill -0 "$PID" 2>/dev/null && [ "$t" -lt $((STOP_S * 10)) ]; do sleep 0.1; t=$((t + 1)); done
    if kill -0 "$PID" 2>/dev/null; then
        echo "test-e2e: FAIL: the server did not exit within $STOP_S s of SIGTERM" >&2; rc=1
    else
        wait "$PID"; src=$?
        [ "$src" -eq 0 ] || { echo "test-e2e: FAIL: the server exited $src after SIGTERM (want 0)" >&2; tail -5 "$LOG" >&2; rc=1; }
    fi
else
    echo "test-e2e: FAIL: the server died during the suites (log: $LOG):" >&2; tail -20 "$LOG" >&2; rc=1
fi

if grep -lE 'ERROR: (Leak|Address)Sanitizer|runtime error:|ERROR: ThreadSanitizer|SUMMARY: (Address|Leak|Undefined)' "$OUT"/*.log >/dev/null 2>&1; then
    for f in $(grep -lE 'ERROR: (Leak|Address)Sanitizer|runtime error:|SUMMARY: (Address|Leak|Undefined)' "$OUT"/*.log); do
        echo "test-e2e: sanitizer report in $f:" >&2
        grep -m1 -B2 -A30 -E 'ERROR: (Leak|Address)Sanitizer|runtime error:' "$f" >&2
    done
    rc=1
fi
[ "$rc" -eq 0 ] && echo "test-e2e: $B: passed" || echo "test-e2e: $B: FAILED" >&2
exit "$rc"
