#!/bin/sh
# bench/spec.sh — speculative decoding against the target alone, radiance and llama.cpp side by
# side, on the committed prompt sets bench/spec/edit-*.txt (the prompt holds the code to rewrite:
# ChatML turns) and bench/spec/complete-*.txt (raw code to continue), greedy (temperature 0), at
# T threads. Per round, for every prompt, in an order that alternates between rounds:
#   radiance: the target alone, --spec ngram, --draft DRAFT (--spec-depth DEPTH, --fast)
#   llama.cpp: llama-completion -no-cnv (the target alone), llama-lookup (its prompt lookup, the
#              n-gram cache), llama-speculative -md DRAFT (its draft model, --spec-draft-n-max DEPTH;
#              llama-speculative-simple refuses this pair: "failed to initialize speculative decoding")
# each generating up to NGEN tokens (stopping at EOS, as a user's request does). A set's rate in
# a round is its tokens over its generation seconds (prompt processing excluded on both sides);
# the table has each configuration's median rate and range over the rounds, the median of its
# per-round ratio to the same engine's target alone, and its drafts' acceptance (accepted /
# drafted, and tokens a verify row on radiance's side). radiance's texts with each drafter are
# compared with its text alone, byte for byte. Not a test.
#
#   sh bench/spec.sh [ROUNDS] [THREADS]          (default 3 rounds, 2 threads; make models first)
#
# TARGET, DRAFT: the GGUFs (default Qwen2.5-Coder-1.5B-Instruct and -0.5B-Instruct Q4_K_M, a real
# pair sharing one tokenizer); NGEN (128), DEPTH (4), SETS ("edit complete").
set -eu
N=${1:-3} T=${2:-2}
. bench/common.sh
TG=${TARGET:-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
DG=${DRAFT:-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}
NGEN=${NGEN:-128} DEPTH=${DEPTH:-4} SETS=${SETS:-edit complete}
[ -f "$TG" ] && [ -f "$DG" ] || { echo "bench/spec.sh: $TG or $DG missing (make models)" >&2; exit 1; }
make -s tools >/dev/null
mkdir -p "$B/spec"
RT=$B/$(basename "$TG" .gguf).rad RD=$B/$(basename "$DG" .gguf).rad
for p in "$TG:$RT" "$DG:$RD"; do
    g=${p%%:*} r=${p#*:}
    [ -f "$r" ] && [ ! build/rad-convert -nt "$r" ] || build/rad-convert "$g" -o "$r" --force >/dev/null
done
LOOKUP=$(llama_cpp_tool llama-lookup) SPEC=$(llama_cpp_tool llama-speculative) COMPL=$(llama_cpp_tool llama-completion)
out=$B/spec/runs.tsv
: > "$out"

# one run: prints "tokens seconds drafted accepted rows", its text to $B/spec/<cfg>-<prompt>.txt
rad() { # $1 config (alone|ngram|draft), $2 prompt file
    case $1 in alone) f="" ;; ngram) f="--spec ngram --spec-depth $DEPTH" ;; draft) f="--draft $RD --spec-depth $DEPTH" ;; esac
    # the prompt less its last newline, as llama.cpp's -f reads a file (common_params_parse drops it)
    # shellcheck disable=SC2086
    build/radiance --model "$RT" -p "$(cat "$2")" -n "$NGEN" --temp 0 --threads "$T" --fast $f \
        >"$B/spec/rad-$1-$(basename "$2")" 2>"$B/spec/err"
    awk '/generation [0-9]+ tokens in/ { for (i = 1; i <= NF; i++) if ($i == "generation") { n = $(i + 1); s = $(i + 4) } }
         /speculation/ { for (i = 1; i <= NF; i++) { if ($i == "rows") { r = $(i - 1); d = $(i + 2) } if ($i == "accepted") a = $(i - 1) } }
         END { printf "%s %s %s %s %s\n", n, s, d + 0, a + 0, r + 0 }' "$B/spec/err"
}
llama() { # $1 config (alone|ngram|draft), $2 prompt file
    case $1 in
    alone) "$COMPL" -m "$TG" -f "$2" -n "$NGEN" --temp 0 -t "$T" -c 2048 -no-cnv </dev/null ;;
    ngram) "$LOOKUP" -m "$TG" -f "$2" -n "$NGEN" --temp 0 -t "$T" -c 2048 ;;
    draft) "$SPEC" -m "$TG" -md "$DG" -f "$2" -n "$NGEN" --temp 0 -t "$T" -td "$T" -c 2048 --spec-draft-n-max "$DEPTH" ;;
    esac >"$B/spec/llama-$1-$(basename "$2")" 2>"$B/spec/err" || { echo "bench/spec.sh: llama.cpp $1 failed on $2:" >&2; tail -3 "$B/spec/err" >&2; exit 1; }
    # the examples' own "decoded N tokens in S seconds" (drafting included); llama-completion's
    # "eval time = MS ms / N runs" where that is all there is
    awk '/decoded +[0-9]+ tokens in/ { for (i = 1; i <= NF; i++) if ($i == "decoded") { dn = $(i + 1); ds = $(i + 4) } }
         / eval time = .* runs/ && !/prompt eval/ { for (i = 1; i <= NF; i++) if ($i == "=") { es = $(i + 1) / 1000; en = $(i + 4) } }
         /n_drafted/ { d = $NF } /n_accept/ { a = $NF }
         END { if (dn != "") printf "%s %s %s %s 0\n", dn, ds, d + 0, a + 0; else printf "%s %s %s %s 0\n", en, es, d + 0, a + 0 }' "$B/spec/err"
}

load0=$(cut -d' ' -f1 /proc/loadavg)
for r in $(seq 1 "$N"); do
    if [ $((r % 2)) -eq 1 ]; then order="R L"; cfgs="alone ngram draft"; else order="L R"; cfgs="draft ngram alone"; fi
    for set in $SETS; do
        for f in bench/spec/"$set"-*.txt; do
            for w in $order; do
                for c in $cfgs; do
                    if [ "$w" = R ]; then res=$(rad "$c" "$f"); else res=$(llama "$c" "$f"); fi
                    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$set" "$w" "$c" "$(basename "$f")" "$res" >> "$out"
                done
            done
        done
    done
done
load1=$(cut -d' ' -f1 /proc/loadavg)
same=0 all=0
for f in "$B"/spec/rad-alone-*.txt; do
    for c in ngram draft; do
        all=$((all + 1))
        cmp -s "$f" "$B/spec/rad-$c-${f#"$B"/spec/rad-alone-}" && same=$((same + 1))
    done
done
echo "spec: $(basename "$TG") with $(basename "$DG") drafting, depth $DEPTH, up to $NGEN tokens, $N rounds, $T threads, --fast" \
     "($(date -u +%F), $(nproc) cores, load average $load0 before, $load1 after)"
echo "radiance's greedy text with each drafter equal to its text alone: $same of $all prompt runs (last round)"
awk -F'\t' '
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function lo(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
function hi(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
{ split($6, v, " "); k = $2 SUBSEP $3 SUBSEP $4; tok[$1, k] += v[1]; sec[$1, k] += v[2]; dr[k] += v[3]; ac[k] += v[4]; rows[k] += v[5]
  if ($1 > n) n = $1; sets[$2] = 1 }
END {
    printf "%-9s %-10s %-15s %-24s %-20s %s\n", "set", "engine", "drafter", "tok/s med [range]", "x alone med [range]", "accepted/drafted, tokens a row"
    split("R L", W, " "); split("alone ngram draft", C, " ")
    for (s in sets) for (w = 1; w <= 2; w++) for (c = 1; c <= 3; c++) {
        k = s SUBSEP W[w] SUBSEP C[c]; ka = s SUBSEP W[w] SUBSEP "alone"
        for (r = 1; r <= n; r++) { x[r] = tok[r, k] / sec[r, k]; q[r] = x[r] / (tok[r, ka] / sec[r, ka]) }
        acc = dr[k] ? sprintf("%.1f%%", 100 * ac[k] / dr[k]) : "-"
        if (rows[k]) acc = acc sprintf(", %.2f", 1 + ac[k] / rows[k])
        printf "%-9s %-10s %-15s %6.1f [%5.1f, %5.1f]     %5.2f [%4.2f, %4.2f]     %s\n", s, (W[w] == "R" ? "radiance" : "llama.cpp"),
               (C[c] == "alone" ? "none" : C[c] == "ngram" ? "prompt lookup" : "draft 0.5B"), med(x, n), lo(x, n), hi(x, n),
               med(q, n), lo(q, n), hi(q, n), acc
    }
    # radiance over llama.cpp, the same drafter and set, per round
    printf "\n%-9s %-15s %s\n", "set", "drafter", "radiance / llama.cpp med [range]"
    for (s in sets) for (c = 1; c <= 3; c++) {
        kr = s SUBSEP "R" SUBSEP C[c]; kl = s SUBSEP "L" SUBSEP C[c]
        for (r = 1; r <= n; r++) q[r] = (tok[r, kr] / sec[r, kr]) / (tok[r, kl] / sec[r, kl])
        printf "%-9s %-15s %5.2f [%4.2f, %4.2f]\n", s, (C[c] == "alone" ? "none" : C[c] == "ngram" ? "prompt lookup" : "draft 0.5B"),
               med(q, n), lo(q, n), hi(q, n)
    }
}' "$out"
