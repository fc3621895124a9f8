#!/bin/sh
# bench/vs-llama.sh — radiance against llama.cpp on one GGUF, paired: ROUNDS rounds, each one
# radiance pp512 and tg128 (as run.sh measures them, --fast; --ignore-eos, so 128 tokens as
# llama-bench generates) and one llama-bench run (-r 1) of
# the same, the order alternating between rounds; then each side's median and range and the
# median and range of the per-round ratio radiance / llama.cpp; then the generation bound: the
# read bandwidth (bench/membw.c before, between and after the rounds: the median) over the bytes a token
# reads, and each side's tg128 median as a share of it. For a VM whose bandwidth moves
# from one minute to the next: a ratio of runs seconds apart, never one run. Not a test.
#
#   sh bench/vs-llama.sh GGUF [ROUNDS] [THREADS]     (default 6 rounds, 2 threads)
#
# The container is build/bench/<GGUF's name>.rad, converted by build/rad-convert when missing or
# older than rad-convert. ARGS: more radiance flags; FAST=0 drops --fast.
set -eu
G=$1 N=${2:-6} T=${3:-2}
. bench/common.sh
mkdir -p "$B"
LLAMA_BENCH=${LLAMA_BENCH:-$(llama_cpp_tool llama-bench)}
RADF=$B/$(basename "$G" .gguf).rad
[ -f "$RADF" ] && [ ! build/rad-convert -nt "$RADF" ] || build/rad-convert "$G" -o "$RADF" --force >/dev/null
ids=$(awk 'BEGIN { s = 1; for (i = 0; i < 512; i++) { s = (s * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), 100 + s % 40000 } }')
FASTF=$([ "${FAST:-1}" = 0 ] || echo --fast)
rad() { # $1 ids, $2 -n, $3 which rate (prompt|generation)
    # shellcheck disable=SC2086
    build/radiance --model "$RADF" --ids "$1" -n "$2" --temp 0 --threads "$T" $FASTF ${ARGS:-} --ignore-eos --print-ids 2>&1 >/dev/null |
        sed -n "s/.*$3 [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p"
}
llama() {
    "$LLAMA_BENCH" -m "$G" -p 512 -n 128 -t "$T" -r 1 -o csv 2>/dev/null |
        awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
                 { gsub(/"/, ""); if ($c["n_gen"] == 0) pp = $c["avg_ts"]; else tg = $c["avg_ts"] } END { print pp, tg }'
}
out=$B/vs-llama.tsv
: > "$out"
[ -x "$B/membw" ] && [ ! bench/membw.c -nt "$B/membw" ] || cc -O2 -march=native -pthread -o "$B/membw" bench/membw.c
BW0=$("$B/membw" "$T" 1024 2>/dev/null) BWS=""
load0=$(cut -d' ' -f1 /proc/loadavg)
for r in $(seq 1 "$N"); do
    if [ $((r % 2)) -eq 1 ]; then sides="R L"; else sides="L R"; fi
    for w in $sides; do
        if [ "$w" = R ]; then pp=$(rad "$ids" 1 prompt); tg=$(rad "${ids%%,*}" 128 generation); else set -- $(llama); pp=$1 tg=$2; fi
        printf '%s\t%s\t%s\t%s\n' "$r" "$w" "$pp" "$tg" >> "$out"
    done
    BWS="$BWS $("$B/membw" "$T" 1024 2>/dev/null)" # the bandwidth of this round's minute
done
load1=$(cut -d' ' -f1 /proc/loadavg)
BW1=$("$B/membw" "$T" 1024 2>/dev/null)
# the bound's bandwidth: the median of membw before, after and between the rounds (the higher of
# before and after alone took one fast moment for the whole run)
BW=$(echo "$BW0 $BWS $BW1" | tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR], NR }')
set -- $BW
BW=$1 BWLO=$2 BWHI=$3 BWN=$4
# bytes a generated token reads: every weight but the embedding table (one row is gathered),
# which a tied head (no output.weight) reads whole
read_bytes=$(build/rad-info --json --tensors "$RADF" | jq '([.tensors[].name] | index("output.weight")) as $head
    | [.tensors[] | select(.name != "tok_embd.weight" or $head == null) | .bytes] | add')
echo "vs-llama: $(basename "$G"), $N rounds, $T threads, ${FASTF:-(no --fast)} ${ARGS:-} ($(date -u +%F), $(nproc) cores, load average $load0 before, $load1 after)"
awk '
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function lo(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
function hi(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
{ v[$1, $2, "pp"] = $3; v[$1, $2, "tg"] = $4; if ($1 > n) n = $1 }
END {
    printf "%-6s %-26s %-26s %s\n", "test", "radiance tok/s med [range]", "llama.cpp tok/s med [range]", "radiance/llama.cpp med [range]"
    split("pp tg", T, " ")
    for (k = 1; k <= 2; k++) {
        t = T[k]
        for (r = 1; r <= n; r++) { a[r] = v[r, "R", t]; b[r] = v[r, "L", t]; q[r] = v[r, "R", t] / v[r, "L", t] }
        ma = med(a, n); mb = med(b, n); mq = med(q, n)
        printf "%-6s %7.1f [%6.1f, %6.1f]     %7.1f [%6.1f, %6.1f]     %5.2f [%5.2f, %5.2f]\n", (t == "pp" ? "pp512" : "tg128"),
               ma, lo(a, n), hi(a, n), mb, lo(b, n), hi(b, n), mq, lo(q, n), hi(q, n)
    }
}' "$out"
awk -v bw="$BW" -v bwlo="$BWLO" -v bwhi="$BWHI" -v bwn="$BWN" -v rb="$read_bytes" '
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
$2 == "R" { r[++nr] = $4 } $2 == "L" { l[++nl] = $4 }
END { bound = bw * 1e9 / rb
      printf "bound  %.2f GB/s (membw: the median of %d runs before, between and after the rounds, range %s-%s) / %d bytes a token = %.1f tok/s; tg128 radiance %.0f%%, llama.cpp %.0f%%\n",
             bw, bwn, bwlo, bwhi, rb, bound, 100 * med(r, nr) / bound, 100 * med(l, nl) / bound }' "$out"
