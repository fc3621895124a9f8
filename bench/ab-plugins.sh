#!/bin/sh
# bench/ab-plugins.sh — two plugin folders (e.g. an old kern_ref.so and the new one, each beside
# copies of the arch plugins) under one radiance, on one container: ROUNDS rounds of tg128 (or
# pp512) alone, alternating which folder goes first, then each side's median and the median and
# range of the per-round ratio B/A. Faster than bench/ab.sh (one test, no llama-bench) for a
# kernel change; an A/A run (the same folder twice) shows the noise. Not a test.
#
#   sh bench/ab-plugins.sh DIR_A DIR_B [ROUNDS] [tg|pp] [RAD]   (default 8, tg, Qwen2.5-Coder-1.5B)
set -eu
A=$1 Bd=$2 N=${3:-8} WHAT=${4:-tg} R=${5:-build/bench/qwen2.5-coder-1.5b-instruct-q4_k_m.rad}
T=${THREADS:-2}
ids=$(awk 'BEGIN { s = 1; for (i = 0; i < 512; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), 100 + s % 40000 } }')
if [ "$WHAT" = pp ]; then set -- "$ids" 1 prompt; else set -- "${ids%%,*}" 128 generation; fi
one() {
    build/radiance --plugin-dir "$1" --model "$R" --ids "$2" -n "$3" --temp 0 --threads "$T" --fast --ignore-eos 2>&1 >/dev/null |
        sed -n "s/.*$4 [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p"
}
for r in $(seq 1 "$N"); do
    if [ $((r % 2)) -eq 1 ]; then a=$(one "$A" "$@"); b=$(one "$Bd" "$@"); else b=$(one "$Bd" "$@"); a=$(one "$A" "$@"); fi
    echo "$a $b"
done | awk -v what="$WHAT" '
function med(x, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
                               return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
{ a[NR] = $1; b[NR] = $2; q[NR] = $2 / $1; printf "%s A %s B %s B/A %.3f\n", what, $1, $2, $2 / $1 }
END { n = NR; printf "%s median A %.1f B %.1f tok/s, B/A %.3f [%.3f, %.3f], %d pairs\n", what, med(a, n), med(b, n), med(q, n), q[1], q[n], n }'
