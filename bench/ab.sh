#!/bin/sh
# bench/ab.sh — two builds of radiance, A and B, paired on the same container and threads:
# pp512 and tg128 (as run.sh measures them, --fast), ROUNDS rounds that alternate which build
# goes first, then the median and range of each build and of the per-round ratio B/A, beside one
# llama-bench run on the same GGUF. For judging a change on a VM whose bandwidth moves from one
# minute to the next: a ratio of runs seconds apart, never one run. Not a test.
#
#   sh bench/ab.sh BUILD_A BUILD_B [ROUNDS] [THREADS]     (default 8 rounds, 2 threads)
#
# BUILD_x is a build folder holding radiance and plugins/ (e.g. a clone of the old commit built
# with make); each build converts the container with its own rad-convert, BUILD_x/ab.rad.
# ARGS_A / ARGS_B: more radiance flags for one side (the same build twice, B with
# ARGS_B="--tune build/ab.tune": a tuning table against the default rule); FAST=0 drops --fast.
# GGUF=FILE another model (its container is BUILD_x/AB_RAD, default ab.rad; bench/make-llama-gguf.py
# writes a larger random Llama).
set -eu
A=$1 Bb=$2 N=${3:-8} T=${4:-2} AB_RAD=${AB_RAD:-ab.rad}
. bench/common.sh
mkdir -p "$B"
LLAMA_BENCH=${LLAMA_BENCH:-$(llama_cpp_tool llama-bench)}
for x in "$A" "$Bb"; do
    [ -x "$x/radiance" ] || { echo "ab: $x/radiance is not built"; exit 2; }
    [ -f "$x/$AB_RAD" ] && [ ! "$x/rad-convert" -nt "$x/$AB_RAD" ] || "$x/rad-convert" "$GGUF" -o "$x/$AB_RAD" --force >/dev/null
done
ids=$(awk 'BEGIN { s = 1; for (i = 0; i < 512; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), 100 + s % 40000 } }')
FASTF=$([ "${FAST:-1}" = 0 ] || echo --fast)
one() { # $1 build, $2 ids, $3 -n, $4 which rate (prompt|generation), $5 the side's extra flags
    # shellcheck disable=SC2086
    # exactly -n tokens (as llama-bench) where the build has --ignore-eos
    ie=$("$1/radiance" --help 2>&1 | grep -q -- --ignore-eos && echo --ignore-eos)
    "$1/radiance" --model "$1/$AB_RAD" --ids "$2" -n "$3" --temp 0 --threads "$T" $FASTF $5 $ie --print-ids 2>&1 >/dev/null |
        sed -n "s/.*$4 [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p"
}
out=$B/ab.tsv
: > "$out"
for r in $(seq 1 "$N"); do
    if [ $((r % 2)) -eq 1 ]; then sides="A B"; else sides="B A"; fi
    for w in $sides; do
        if [ "$w" = A ]; then x=$A; xa=${ARGS_A:-}; else x=$Bb; xa=${ARGS_B:-}; fi
        pp=$(one "$x" "$ids" 1 prompt "$xa"); tg=$(one "$x" "${ids%%,*}" 128 generation "$xa")
        printf '%s\t%s\t%s\t%s\n' "$r" "$w" "$pp" "$tg" >> "$out"
    done
done
"$LLAMA_BENCH" -m "$GGUF" -p 512 -n 128 -t "$T" -r 3 -o csv > "$B/ab-llama.csv" 2>/dev/null
l=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
             { gsub(/"/, ""); if ($c["n_gen"] == 0) pp = $c["avg_ts"]; else tg = $c["avg_ts"] } END { print pp, tg }' "$B/ab-llama.csv")
echo "ab: $N rounds, $T threads, A=$A ${ARGS_A:-} B=$Bb ${ARGS_B:-} ${FASTF:-(no --fast)} ($(date -u +%F), $(nproc) cores)"
awk -v l="$l" '
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function lo(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
function hi(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
{ v[$1, $2, "pp"] = $3; v[$1, $2, "tg"] = $4; if ($1 > n) n = $1 }
END {
    split(l, L, " ")
    printf "%-6s %-24s %-24s %-22s %s\n", "test", "A tok/s median [range]", "B tok/s median [range]", "B/A median [range]", "llama.cpp"
    split("pp tg", T, " ")
    for (k = 1; k <= 2; k++) {
        t = T[k]
        for (r = 1; r <= n; r++) { a[r] = v[r, "A", t]; b[r] = v[r, "B", t]; q[r] = v[r, "B", t] / v[r, "A", t] }
        ma = med(a, n); mb = med(b, n); mq = med(q, n)
        printf "%-6s %7.1f [%6.1f, %6.1f]   %7.1f [%6.1f, %6.1f]   %5.3f [%5.3f, %5.3f]   %7.1f\n", (t == "pp" ? "pp512" : "tg128"),
               ma, lo(a, n), hi(a, n), mb, lo(b, n), hi(b, n), mq, lo(q, n), hi(q, n), L[k]
    }
}' "$out"
