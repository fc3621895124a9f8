#!/bin/sh
# tests/gpu/check.sh — libr4d on a GPU, in one command (docs/GPU.md). Builds kern_r4d.so for
# sm_90a with the machine's nvcc, makes random-weight Llamas at TinyLlama-1.1B's shape (bf16, q8_0
# and llama.cpp's Q4_K_M mixture: tests/gpu/make-models.py), and writes $OUT/report.md:
#   1. rad-kbench --kernels $KLIB,ref --bench --fast on each (--max-tolerance 5e-2 on the fp8 one, for
#      lt_fp8's fp8 tensor cores; 2 layers: the shapes, not the depth;
#      a 16-bit KV cache so the tensor-core attention is among the candidates): every
#      r4d kernel's check against libref and the reference, its median time, and its share of the
#      H200's HBM bandwidth (4.8 TB/s) and bf16 tensor-core rate (989 TFLOP/s);
#   2. greedy text: radiance --kernels r4d against --kernels ref (exact paths, 32 tokens, token-id
#      prompts, one of 700 tokens) on the three 22-layer models and a 2-layer block-scaled fp8 one
#      (tests/gpu/make-models.py --fp8), and against transformers (the
#      oracle, f32 on the bf16 weights: tests/gpu/oracle.py) on the bf16 one; --tp 2 against
#      --tp 1 on the q4k one where the machine has two GPUs;
#   3. radiance tg128 and pp512 on r4d, exact and --fast --kv-type f16 (q8/bf16 GEMMs, the
#      tensor-core prefill attention), and batch-1 decode against the bound (the bytes a token
#      reads over 4.8 TB/s), tg128 with decode graphs and without (R4D_GRAPHS=0);
#   4. the server on r4d at concurrency 1, 8 and 32 (tests/gpu/serve_load.py).
# Tools: build/ (a build on this machine), else (or with CARRY=1) build/gpu-carry/ (tests/gpu/prepare.sh, made on
# the build machine: the tools, plugins and their libraries). Every stage has a time limit; the
# whole is meant to stay under 8 minutes on an H200 (not yet timed on one). Exit 0 when every check passed, 1 otherwise; the report
# is written either way.
#
# A dry run on a CPU (the script's own check, docs/GPU.md): KLIB=fakedev KDIR=DIR BIG_LAYERS=2
# runs every stage with tests/plugins/kern_fakedev.c (libref behind CUDA memory hooks) in r4d's
# place, skipping the nvcc build; KB_LIMIT=400 gives rad-kbench's CPU-only timing the time it
# takes on 2 cores (150 s a model on the GPU machine).
set -u
KLIB=${KLIB:-r4d}
BIG_LAYERS=${BIG_LAYERS:-22}
PY=${PY:-python3}
OUT=${OUT:-build/gpu-report}
mkdir -p "$OUT"
R=$OUT/report.md
LOG=$OUT/log.txt
: >"$LOG"
T0=$(date +%s)
FAILS=0
say() { printf '%s\n' "$*" >>"$R"; }
note() { printf '[%4ss] %s\n' $(($(date +%s) - T0)) "$*" | tee -a "$LOG"; }
fail() { FAILS=$((FAILS + 1)); note "FAIL: $*"; say "- **FAIL**: $*"; }
run() { # run LIMIT CMD...: the command's output into the log; its status
    lim=$1; shift
    timeout "$lim" "$@" >>"$LOG" 2>&1
}

: >"$R"
say "# libr4d on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU') — $(date -u '+%Y-%m-%d %H:%M UTC')"
say ""
say '```'
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv >>"$R" 2>&1
(nvcc --version 2>&1 | tail -2) >>"$R"
say '```'

# ---- 0. tools and libr4d ------------------------------------------------------------------------
if [ -z "${CARRY:-}" ] && [ -x build/radiance ] && build/radiance --help >/dev/null 2>&1; then
    BIN=build PLUG=build/plugins
elif [ -d build/gpu-carry ]; then
    # the carried tools, each through a wrapper that gives it the carried libraries (python3 and
    # nvcc keep the machine's own)
    BIN=build/gpu-bin PLUG=build/gpu-carry/plugins
    mkdir -p "$BIN"
    [ -d build/gpu-carry/lib ] || python3 -c "import tarfile; tarfile.open('build/gpu-carry/lib.tar.xz').extractall('build/gpu-carry')"
    for t in build/gpu-carry/bin/*; do
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/build/gpu-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s/%s "$@"\n' \
            "$PWD" "$PWD" "$t" >"$BIN/$(basename "$t")"
        chmod +x "$BIN/$(basename "$t")"
    done
else
    echo "check.sh: no tools: run make here, or tests/gpu/prepare.sh on the build machine and carry build/gpu-carry" >&2
    exit 2
fi
if ! "$BIN/radiance" --help >/dev/null 2>&1; then
    "$BIN/radiance" --help 2>&1 | head -3 >&2
    echo "check.sh: $BIN/radiance does not run here" >&2
    exit 2
fi
note "tools: $BIN; building libr4d for sm_90a"
if [ "$KLIB" != r4d ]; then
    CUDA=${KDIR:?KDIR: the folder holding the kern_$KLIB.so that stands in for libr4d}
elif run 240 make -j"$(nproc)" r4d B=build/gpu-r4d R4D_ARCH="-gencode=arch=compute_90a,code=sm_90a"; then
    CUDA=build/gpu-r4d/plugins-cuda
elif [ -f build/gpu-carry/plugins-cuda/kern_r4d.so ]; then
    CUDA=build/gpu-carry/plugins-cuda
    fail "nvcc build of kern_r4d.so failed here (log); the carried build is checked"
else
    fail "no kern_r4d.so: the nvcc build failed (log)"
    exit 1
fi
PD="--plugin-dir $PLUG --plugin-dir $CUDA"
"$BIN/rad-info" --plugins $PD >>"$LOG" 2>&1

# ---- 1. models ----------------------------------------------------------------------------------
M=build/gpu-models
mkdir -p "$M"
note "models: random Llamas (1.1B and 2 layers) in $M"
if [ ! -f "$M/big/llama-q4k.gguf" ]; then
    run 180 "$PY" tests/gpu/make-models.py --out "$M/big" --layers "$BIG_LAYERS" || fail "make-models.py ($BIG_LAYERS layers)"
fi
[ -f "$M/k/llama-fp8/config.json" ] || run 90 "$PY" tests/gpu/make-models.py --out "$M/k" --layers 2 --fp8 || fail "make-models.py (2 layers)"
[ -f "$M/k/fp8.rad" ] || run 120 "$BIN/rad-convert" "$M/k/llama-fp8" -o "$M/k/fp8.rad" --no-tokenizer --force || fail "convert k fp8"
for d in big k; do
    [ -f "$M/$d/bf16.rad" ] || run 120 "$BIN/rad-convert" "$M/$d/llama-bf16" -o "$M/$d/bf16.rad" --no-tokenizer --force || fail "convert $d bf16"
    [ -f "$M/$d/q8.rad" ] || run 120 "$BIN/rad-convert" "$M/$d/llama-bf16" -o "$M/$d/q8.rad" --quant q8_0 --no-tokenizer --force || fail "convert $d q8_0"
    [ -f "$M/$d/q4k.rad" ] || run 120 "$BIN/rad-convert" "$M/$d/llama-q4k.gguf" -o "$M/$d/q4k.rad" --force || fail "convert $d q4k"
done

# ---- 2. rad-kbench ------------------------------------------------------------------------------
say ""
say "## rad-kbench --kernels $KLIB,ref (2-layer models at TinyLlama-1.1B's shape)"
say ""
say "Each r4d kernel checked against the reference (its stated exactness) and timed (median of the"
say "repeats, synced each call: launch included). HBM share: bytes / time over 4.8 TB/s; TC share:"
say "flops / time over 989 TFLOP/s (dense bf16)."
for m in bf16 q8 q4k fp8; do
    note "kbench $m"
    # a 16-bit cache, so --fast's tensor-core prefill attention (flash) runs: bf16 on the bf16 model, f16 on the others
    kvt=f16; [ $m = bf16 ] && kvt=bf16 # fp8 (block-scaled f8_e4m3 linears) with f16
    # fp8: --max-tolerance 5e-2, so lt_fp8 (fp8 tensor cores, RAD_EXACT_F8ACT) is among the candidates
    tol=--fast; [ $m = fp8 ] && tol="--max-tolerance 5e-2"
    if ! timeout "${KB_LIMIT:-150}" "$BIN/rad-kbench" -m "$M/k/$m.rad" --kernels "$KLIB",ref $PD --quick --bench $tol --kv-type $kvt --json --threads "$(nproc)" \
        --max-mixed-tok 256 --max-seqs 8 --ctx 2048 --buckets 1,8,64,256 >"$OUT/kbench-$m.json" 2>>"$LOG"; then
        fail "rad-kbench on $m (exit or time limit; rows below are what it wrote)"
    fi
    "$PY" - "$OUT/kbench-$m.json" "$m" >>"$R" 2>>"$LOG" <<'EOF' || fail "kbench report for $m"
import json, sys
path, m = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(path))
except Exception as ex:
    print("\n%s: no report (%s)" % (m, ex)); sys.exit(1)
lib = d["kernels"].split(",")[0] + ":"
rows = [r for r in d["rows"] if r["kernel"].startswith(lib) and r.get("check") == "ref"]
bad = [r for r in d["rows"] if r["kernel"].startswith(lib) and not r["pass"]]
print("\n### %s (%s cache): %d %s checks, %d failed\n" % (m, "bf16" if m == "bf16" else "f16", len(rows), lib[:-1], len(bad)))
print("| kernel | rows | shape | max err | tolerance | pass | median µs | GB/s | HBM share | TFLOP/s | TC share |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
seen = set()
for r in rows:
    key = (r["kernel"], r["rows"], r["shape"])
    if key in seen:  # the same shape on the next layer
        continue
    seen.add(key)
    ns = r.get("ns_median") or 0
    gbs = r["bytes"] / ns if ns else 0
    tf = r["flops"] / ns / 1e3 if ns else 0
    print("| %s | %d | %s | %.2e | %s | %s | %.1f | %.0f | %.1f%% | %.1f | %.1f%% |" % (
        r["kernel"][len(lib):], r["rows"], r["shape"], r["max_err"], r["exactness"] if r["exactness"] == "bitwise" else "%.0e" % r["tolerance"],
        "yes" if r["pass"] else "**NO**", ns / 1e3, gbs, 100 * gbs / 4800, tf, 100 * tf / 989))
for r in bad[:20]:
    print("\n- FAIL %s rows %d %s: %s" % (r["kernel"], r["rows"], r["shape"], r.get("why", "")))
sys.exit(1 if bad else 0)
EOF
done

# ---- 3. greedy text -----------------------------------------------------------------------------
say ""
say "## Greedy continuations: r4d against ref (exact paths) and against transformers"
say ""
PROMPTS=$("$PY" -c "
import random
r = random.Random(7)
ps = [','.join(str(r.randrange(3, 32000)) for _ in range(n)) for n in (5, 12, 31, 64, 100, 7, 200)]
ps.append(','.join(str(r.randrange(3, 32000)) for _ in range(700)))
print(' '.join(ps))")
gen() { # gen MODEL KERNELS PROMPT [FLAGS...] -> ids on one line
    g_m=$1 g_k=$2 g_p=$3; shift 3
    timeout 120 "$BIN/radiance" --model "$g_m" --kernels "$g_k" $PD --ids "$g_p" -n 32 --temp 0 --print-ids --ignore-eos \
        --threads "$(nproc)" --ctx 1024 "$@" 2>>"$LOG" | tr '\n' ',' | sed 's/,$//'
}
same_as_ref() { # same_as_ref MODEL LABEL PROMPT...: greedy r4d against ref on each prompt, reported
    mdl=$1 lbl=$2; shift 2
    same=0 total=0
    for p in "$@"; do
        a=$(gen "$mdl" "$KLIB" "$p") b=$(gen "$mdl" ref "$p")
        total=$((total + 1))
        if [ -n "$a" ] && [ "$a" = "$b" ]; then same=$((same + 1)); else note "$lbl: r4d $a / ref $b"; fi
    done
    say "- $lbl: r4d = ref on $same of $total prompts"
    [ "$same" = "$total" ] || fail "$lbl: greedy r4d differs from ref on $((total - same)) prompts (log)"
}
for m in bf16 q8 q4k; do
    same_as_ref "$M/big/$m.rad" "$m" $PROMPTS
done
# block-scaled fp8 (llama_fp8): the 2-layer model, the first five prompts (r4d's gemv/lt_f32 against libref's fp8)
same_as_ref "$M/k/fp8.rad" "fp8 (2 layers)" $(echo $PROMPTS | cut -d' ' -f1-5)
# tensor parallelism (docs/GPU.md): --tp 2 against --tp 1 on r4d, where there are two GPUs (the
# stand-in library has as many "devices" as asked)
if [ "$KLIB" = fakedev ]; then N_GPU=2; else N_GPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); fi
if [ "$N_GPU" -ge 2 ]; then
    same=0 same_g=0 total=0
    for p in $(echo $PROMPTS | cut -d' ' -f1-4); do
        a=$(gen "$M/big/q4k.rad" "$KLIB" "$p") b=$(gen "$M/big/q4k.rad" "$KLIB" "$p" --tp 2)
        g=$(export R4D_GRAPHS_TP=1; gen "$M/big/q4k.rad" "$KLIB" "$p" --tp 2) # decode graphs under --tp (opt-in)
        total=$((total + 1))
        if [ -n "$b" ] && [ "$a" = "$b" ]; then same=$((same + 1)); else note "tp: --tp 1 $a / --tp 2 $b"; fi
        if [ -n "$g" ] && [ "$a" = "$g" ]; then same_g=$((same_g + 1)); else note "tp graphs: --tp 1 $a / --tp 2 R4D_GRAPHS_TP=1 $g"; fi
    done
    say "- q4k \`--tp 2\` (two GPUs, NCCL, the exact wire) = \`--tp 1\` on $same of $total prompts; with decode graphs (\`R4D_GRAPHS_TP=1\`) on $same_g"
    [ "$same" = "$total" ] || fail "q4k: greedy --tp 2 differs from --tp 1 on $((total - same)) prompts (log)"
    [ "$same_g" = "$total" ] || fail "q4k: greedy --tp 2 with R4D_GRAPHS_TP=1 differs from --tp 1 on $((total - same_g)) prompts (log)"
else
    say "- \`--tp 2\`: skipped, this machine has $N_GPU GPU (it needs two)"
fi
note "oracle (transformers)"
if timeout 200 "$PY" tests/gpu/oracle.py "$M/big/llama-bf16" 32 $PROMPTS >"$OUT/oracle.txt" 2>>"$LOG"; then
    same=0 total=0 i=0
    for p in $PROMPTS; do
        i=$((i + 1))
        want=$(sed -n "${i}p" "$OUT/oracle.txt" | cut -f1) margin=$(sed -n "${i}p" "$OUT/oracle.txt" | cut -f2)
        got=$(gen "$M/big/bf16.rad" "$KLIB" "$p")
        total=$((total + 1))
        if [ "$got" = "$want" ]; then same=$((same + 1)); else note "oracle prompt $i (least margin $margin): r4d $got / transformers $want"; fi
    done
    say "- bf16 against transformers: $same of $total prompts identical (tests/gpu/oracle.py; least margins in $OUT/oracle.txt)"
    [ "$same" = "$total" ] || fail "bf16: r4d's greedy text differs from transformers' on $((total - same)) prompts"
else
    fail "tests/gpu/oracle.py did not run (log)"
fi

# ---- 4. throughput ------------------------------------------------------------------------------
say ""
say "## radiance on r4d: pp512 and tg128, batch 1 (22 layers)"
say ""
say "Exact kernels (the default), then \`--fast --kv-type f16\` (q8 activations to 8 rows, bf16 tensor-core GEMMs"
say "beyond, the tensor-core prefill attention)."
say ""
say "| model | weight bytes | pp512 tok/s | tg128 tok/s | tg128 without graphs (R4D_GRAPHS=0) | pp512 --fast | tg128 --fast | bound tok/s (bytes / 4.8 TB/s) | share of bound (tg128, best) |"
say "|---|---|---|---|---|---|---|---|---|"
P512=$("$PY" -c "print(','.join(str(3 + (i * 7919) % 31990) for i in range(512)))")
pp_run() { # pp_run MODEL FLAGS... -> prompt tok/s
    f=$1; shift
    timeout 120 "$BIN/radiance" --model "$f" --kernels "$KLIB" $PD "$@" --ids "$P512" -n 1 --temp 0 --print-ids --max-mixed-tok 512 2>&1 >/dev/null |
        sed -n 's/.*prompt \([0-9]*\) tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\2/p'
}
tg_run() { # tg_run MODEL FLAGS... -> generation tok/s
    f=$1; shift
    timeout 120 "$BIN/radiance" --model "$f" --kernels "$KLIB" $PD "$@" --ids 1,2,3 -n 128 --ignore-eos --temp 0 --print-ids 2>&1 >/dev/null |
        sed -n 's/.*generation \([0-9]*\) tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\2/p'
}
for m in bf16 q8 q4k; do
    f=$M/big/$m.rad
    bytes=$("$BIN/rad-info" "$f" --tensors --json 2>/dev/null | python3 -c "
import json,sys
d=json.load(sys.stdin)  # what a token reads: every weight but the embedding, of which it gathers a row
print(sum(t['bytes'] for t in d['tensors'] if t['name'] != 'tok_embd.weight'))" 2>/dev/null || echo 0)
    pp=$(pp_run "$f")
    tg=$(tg_run "$f")
    tg0=$(R4D_GRAPHS=0 tg_run "$f")
    ppf=$(pp_run "$f" --fast --kv-type f16)
    tgf=$(tg_run "$f" --fast --kv-type f16)
    "$PY" -c "
b, pp, tg, tg0, ppf, tgf = int('${bytes:-0}' or 0), '${pp:-}', '${tg:-}', '${tg0:-}', '${ppf:-}', '${tgf:-}'
bound = 4.8e12 / b if b else 0
best = max([float(x) for x in (tg, tgf) if x] or [0])
share = '%.0f%%' % (100 * best / bound) if best and bound else '-'
print('| $m | %.2f GB | %s | %s | %s | %s | %s | %.0f | %s |' % (b / 1e9, pp or '-', tg or '-', tg0 or '-', ppf or '-', tgf or '-', bound, share))" >>"$R"
    [ -n "$pp" ] && [ -n "$tg" ] || fail "$m: radiance on r4d did not time (log)"
    [ -n "$ppf" ] && [ -n "$tgf" ] || fail "$m: radiance --fast on r4d did not time (log)"
done

# ---- 5. the server ------------------------------------------------------------------------------
say ""
say "## The server on r4d (q4k, 22 layers): /v1/completions, 64 tokens, temperature 0"
say ""
say "| concurrency | requests | failures | tok/s | p50 s | p99 s |"
say "|---|---|---|---|---|---|"
PORT=18090
"$BIN/radiance" --model "$M/big/q4k.rad" --kernels "$KLIB" $PD --port $PORT --served-model-name m --max-seqs 32 --ctx 1024 >>"$LOG" 2>&1 &
SRV=$!
up=0
for i in $(seq 1 60); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=1)" 2>/dev/null; then up=1; break; fi
    sleep 1
done
if [ $up = 1 ]; then
    for c in 1 8 32; do
        n=$((c * 3)); [ $n -lt 4 ] && n=4
        timeout 120 "$PY" tests/gpu/serve_load.py "http://127.0.0.1:$PORT" $c $n 64 >"$OUT/serve-$c.json" 2>>"$LOG" || fail "serve_load at $c"
        "$PY" -c "
import json; d = json.load(open('$OUT/serve-$c.json'))
print('| %d | %d | %d | %.1f | %.3f | %.3f |' % (d['concurrency'], d['requests'], d['failures'], d['tok_s'], d['p50_s'], d['p99_s']))" >>"$R" 2>>"$LOG"
    done
else
    fail "the server on r4d did not come up (log)"
fi
kill $SRV 2>/dev/null
wait $SRV 2>/dev/null

say ""
say "$FAILS failure(s); $(($(date +%s) - T0)) s in all. Log: $LOG."
note "done: $FAILS failure(s)"
cat "$R"
[ $FAILS = 0 ]
