/* rad-kbench end to end: libref and kern_test pass on the tiny random Llama the engine tests write
 * and libref on the default model (quick mode); kern_wrong's four wrong kernels (an off-by-one
 * row, a wrong scale, a kernel looser than it states, a fusion that disagrees with its chain) are
 * each reported failing by name with exit 1, while its right kernels pass; --json keeps its keys;
 * usage errors exit 2. The sanitizer build (RAD_ORACLE_QUICK=1) checks fewer buckets of the
 * default model. Timing (--bench) is never asserted. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/plugin/rad_tune.h"

#include "tests/test_util.h"
#include "tests/tiny_llama.h"

enum { L = 2, E = 64, H = 4, G = 2, HD = 16, FF = 96, V = 128 };

static char dir[64], tiny[128];
static float *held[64]; /* the writer reads the planes at finish */
static int n_held;

static const char *build(void) {
    const char *b = getenv("RAD_BUILD");
    return b && *b ? b : "build";
}

static void add(RadWriter *w, const char *name, uint32_t rank, uint64_t a, uint64_t b, unsigned *seed, float scale, float bias) {
    uint64_t shape[2] = {a, b}, n = rank == 2 ? a * b : a;
    float *d = malloc(n * sizeof *d);
    for (uint64_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        d[i] = ((float)((*seed >> 8) & 0xffff) / 65535.0f - 0.5f) * scale + bias;
    }
    RadPlaneSrc p = {"data", d, n * sizeof(float)};
    RadErr e = {0};
    cr_assert_eq(rad_writer_add_tensor(w, name, RAD_ENC_F32, rank, shape, 1, &p, &e), RAD_OK, "%s", e.msg);
    held[n_held++] = d;
}

static void setup(void) {
    test_deadline(600);
    snprintf(dir, sizeof dir, "/tmp/rad-kbench-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(tiny, sizeof tiny, "%s/tiny.rad", dir);
    RadDict meta;
    RadErr e = {0};
    tiny_llama_meta(&meta, L, E, H, G, HD, FF, V, &e);
    RadWriter *w;
    cr_assert_eq(rad_writer_init(&w, tiny, NULL, 1, &e), RAD_OK, "%s", e.msg);
    rad_writer_set_kv(w, 0, &meta, &e);
    unsigned seed = 11;
    add(w, "tok_embd.weight", 2, V, E, &seed, 1.0f, 0);
    add(w, "output.weight", 2, V, E, &seed, 0.5f, 0);
    add(w, "output_norm.weight", 1, E, 0, &seed, 0.2f, 1);
    for (int l = 0; l < L; l++) {
        char n[64];
#define ADD(suffix, r, a, b, s, bias) snprintf(n, sizeof n, "blk.%d." suffix, l), add(w, n, r, a, b, &seed, s, bias)
        ADD("attn_norm.weight", 1, E, 0, 0.2f, 1);
        ADD("attn_q.weight", 2, H * HD, E, 0.4f, 0);
        ADD("attn_k.weight", 2, G * HD, E, 0.4f, 0);
        ADD("attn_v.weight", 2, G * HD, E, 0.4f, 0);
        ADD("attn_output.weight", 2, E, H * HD, 0.4f, 0);
        ADD("ffn_norm.weight", 1, E, 0, 0.2f, 1);
        ADD("ffn_gate.weight", 2, FF, E, 0.4f, 0);
        ADD("ffn_up.weight", 2, FF, E, 0.4f, 0);
        ADD("ffn_down.weight", 2, E, FF, 0.4f, 0);
#undef ADD
    }
    cr_assert_eq(rad_writer_finish(w, &e), RAD_OK, "%s", e.msg);
    rad_writer_free(w);
    rad_dict_free(&meta);
    while (n_held) free(held[--n_held]);
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(kbench, .init = setup, .fini = teardown); /* setup sets each test's deadline (600 s) */

/* rad-kbench with args (the plugin dirs added: the test plugins too when test_plugins); its exit
 * status; stdout and stderr in dir/out, dir/err. The default model runs without the test plugins,
 * among which another importer of q4_1 Llamas would make its plugin ambiguous. */
static int kbench_with(int test_plugins, const char *args) {
    char cmd[1024], tp[300] = "";
    if (test_plugins) snprintf(tp, sizeof tp, "--plugin-dir %s/test-plugins ", build());
    snprintf(cmd, sizeof cmd, "%s/rad-kbench %s--plugin-dir %s/plugins %s >%s/out 2>%s/err", build(), tp, build(), args, dir, dir);
    int st = system(cmd);
    cr_assert(WIFEXITED(st), "%s: killed", cmd);
    return WEXITSTATUS(st);
}
static int kbench(const char *args) { return kbench_with(1, args); }

static char *slurp_file(const char *name) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    cr_assert_not_null(f, "%s", p);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

Test(kbench, ref_and_kern_test_pass_on_the_tiny_llama) {
    const char *libs[] = {"ref", "kern_test"};
    for (int i = 0; i < 2; i++) {
        char a[512];
        snprintf(a, sizeof a, "-m %s --kernels %s --quick --max-mixed-tok 16 --max-seqs 4 --ctx 320 --report %s/k.md", tiny,
                 libs[i], dir);
        int rc = kbench(a);
        const char *err = slurp_file("err");
        cr_assert_eq(rc, 0, "%s: exit %d\n%s", libs[i], rc, err);
        cr_assert(strstr(err, "every kernel passes"), "%s", err);
        const char *md = slurp_file("k.md");
        /* a table per op, the attention at several context lengths, the fusion against its chain */
        cr_assert(strstr(md, "\n## gemm_nt\n") && strstr(md, "\n## attn_paged\n") && strstr(md, "\n## add_rmsnorm\n"), "%s", md);
        cr_assert(strstr(md, "| prefill | 300 |") && strstr(md, "| decode | 17 |"), "%s", md);
        cr_assert(strstr(md, ":add_rmsnorm:") && strstr(md, "| chain |"), "%s", md);
    }
}

/* A sequence whose context fills its last block and its block-table row to the end (--ctx 64:
 * four blocks of 16): libref's attention once read the table entry past the row (caught by
 * this case under ASan). */
Test(kbench, attention_at_a_full_block_table) {
    char a[512];
    snprintf(a, sizeof a, "-m %s --kernels ref --quick --max-mixed-tok 4 --max-seqs 2 --ctx 64 --ops attn_paged", tiny);
    int rc = kbench(a);
    cr_assert_eq(rc, 0, "exit %d\n%s", rc, slurp_file("err"));
    cr_assert(strstr(slurp_file("err"), "every kernel passes"), "%s", slurp_file("err"));
}

/* Each wrong kernel by name and bucket; the right kernels of the same library pass. */
Test(kbench, wrong_kernels_are_named_and_fail) {
    char a[512];
    snprintf(a, sizeof a, "-m %s --kernels kern_wrong --quick --max-mixed-tok 4 --max-seqs 2 --ctx 64 --json", tiny);
    int rc = kbench(a);
    const char *err = slurp_file("err");
    cr_assert_eq(rc, 1, "exit %d\n%s", rc, err);
    static const char *named[] = {
        "FAIL kern_wrong:gemm_nt:offbyone bucket 2..3:", "FAIL kern_wrong:gemm_nt:offbyone bucket 4..4:",
        "FAIL kern_wrong:rmsnorm:badscale bucket 2..3:", "FAIL kern_wrong:silu_mul:bf16 bucket 1..1:",
        "FAIL kern_wrong:add_rmsnorm:stale bucket 1..1:", "FAIL kern_wrong:add_rmsnorm:stale bucket 1..1 against its chain:",
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) cr_assert(strstr(err, named[i]), "no '%s' in:\n%s", named[i], err);
    cr_assert(strstr(err, "silu_mul:bf16 bucket 1..1: max err") && strstr(err, "tolerance 1e-06"), "%s", err);
    /* at one row the chain is right (kern_test's rmsnorm): only the stale fusion disagrees with it;
     * from two rows the chain takes the bad rmsnorm, and the right fusion is said to disagree with it */
    cr_assert(strstr(err, "disagrees with its chain kern_wrong:add:generic+kern_wrong:rmsnorm:generic"), "%s", err);
    cr_assert(strstr(err, "FAIL kern_wrong:add_rmsnorm:generic bucket 2..3 against its chain") &&
                  strstr(err, "disagrees with its chain kern_wrong:add:generic+kern_wrong:rmsnorm:badscale"),
              "%s", err);
    /* an off-by-one row is right at one row: not a failure there */
    cr_assert_null(strstr(err, "gemm_nt:offbyone bucket 1..1"), "%s", err);
    /* kern_test's own kernels, checked beside the wrong ones, pass */
    static const char *right[] = {"FAIL kern_wrong:gemm_nt:generic", "FAIL kern_wrong:gemm_nt:gemv", "FAIL kern_wrong:rmsnorm:generic",
                                  "FAIL kern_wrong:silu_mul:generic", "FAIL kern_wrong:add_rmsnorm:generic bucket 1..1",
                                  "FAIL kern_wrong:add_rmsnorm:generic bucket 2..3:", "FAIL kern_wrong:attn_paged",
                                  "FAIL kern_wrong:rope", "FAIL kern_wrong:embed_gather", "FAIL kern_wrong:logits_gemm",
                                  "FAIL kern_wrong:logits_gather", "FAIL kern_wrong:add:"};
    for (size_t i = 0; i < sizeof right / sizeof right[0]; i++) cr_assert_null(strstr(err, right[i]), "%s failed:\n%s", right[i], err);
    /* the JSON names the same failures, with its stable keys */
    json_error_t je;
    json_t *j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j, "--json: %s", je.text);
    json_t *rows = json_object_get(j, "rows");
    cr_assert(json_is_array(rows) && json_array_size(rows) > 0);
    int off = 0, off_ok = 0, unpicked = 0; /* the candidates the selector did not pick are checked too */
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        static const char *keys[] = {"op", "op_index", "kernel", "check", "bucket", "rows", "shape", "ctx", "exactness",
                                     "tolerance", "max_err", "mean_err", "n_diff", "pass", "why", "knobs", "allowance_used"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) cr_assert_not_null(json_object_get(r, keys[k]), "%s", keys[k]);
        const char *kn = json_string_value(json_object_get(r, "kernel"));
        unpicked |= (strcmp(kn, "kern_wrong:gemm_nt:generic") == 0) | (strcmp(kn, "kern_wrong:gemm_nt:gemv") == 0) << 1 |
                    (strcmp(kn, "kern_wrong:add_rmsnorm:generic") == 0) << 2;
        if (strcmp(kn, "kern_wrong:gemm_nt:offbyone") == 0) {
            const int pass = json_is_true(json_object_get(r, "pass"));
            if (json_integer_value(json_object_get(r, "rows")) == 1) off_ok += pass;
            else off += !pass;
        }
    }
    cr_assert(off > 0 && off_ok > 0, "offbyone: %d failing multi-row checks, %d passing one-row checks", off, off_ok);
    cr_assert_eq(unpicked, 7, "candidates not checked: %d", unpicked);
    cr_assert(json_integer_value(json_object_get(json_object_get(j, "summary"), "failed")) > 0);
    json_decref(j);
}

/* Under --fast a per-output class (`exactness`) is a candidate and is checked output by output
 * against docs/OPS.md's bound: kern_wrong's `bad` kernel, which states the class but keeps too
 * few bits, is named over its `bound` bound; `good`, the same kernel at the class's precision,
 * passes (its outputs within the bound), as does the exact chain beside them. */
static void per_output_class_checked(const char *bad, const char *good, const char *exactness, const char *bound,
                                     const char *tolerance) {
    char a[512], want[160];
    snprintf(a, sizeof a, "-m %s --kernels kern_wrong --quick --max-mixed-tok 4 --max-seqs 2 --ctx 64 %s --ops gemm_nt --json",
             tiny, tolerance);
    int rc = kbench(a);
    const char *err = slurp_file("err");
    cr_assert_eq(rc, 1, "exit %d\n%s", rc, err);
    char bad_k[64], good_k[64];
    snprintf(bad_k, sizeof bad_k, "kern_wrong:gemm_nt:%s", bad), snprintf(good_k, sizeof good_k, "kern_wrong:gemm_nt:%s", good);
    snprintf(want, sizeof want, "FAIL %s bucket 1..1:", bad_k);
    cr_assert(strstr(err, want), "no '%s' in:\n%s", want, err);
    snprintf(want, sizeof want, "of its %s bound", bound);
    cr_assert(strstr(err, want), "no '%s' in:\n%s", want, err);
    snprintf(want, sizeof want, "FAIL %s", good_k);
    cr_assert_null(strstr(err, want), "%s", err);
    json_error_t je;
    json_t *j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j, "--json: %s", je.text);
    size_t i;
    json_t *r;
    int good_pass = 0, bad_fail = 0;
    json_array_foreach(json_object_get(j, "rows"), i, r) {
        const char *kn = json_string_value(json_object_get(r, "kernel"));
        const double used = json_real_value(json_object_get(r, "allowance_used"));
        const int is_good = strcmp(kn, good_k) == 0;
        if (!is_good && strcmp(kn, bad_k)) continue;
        cr_assert_str_eq(json_string_value(json_object_get(r, "exactness")), exactness);
        if (is_good) good_pass += json_is_true(json_object_get(r, "pass")) && used > 0 && used <= 1;
        else bad_fail += !json_is_true(json_object_get(r, "pass")) && used > 1;
    }
    cr_assert(good_pass > 0 && bad_fail > 0, "%s passing %d, %s failing %d", good, good_pass, bad, bad_fail);
    json_decref(j);
}

/* q8 activations: q4act quantises x to 4 bits; q8act as the class states. */
Test(kbench, q8_activation_kernels_are_checked_per_output) { per_output_class_checked("q4act", "q8act", "q8act", "q8", "--fast"); }

/* bf16 products: bf12act keeps 4 significant bits of x and w; bf16act rounds to bf16. */
Test(kbench, bf16_product_kernels_are_checked_per_output) {
    per_output_class_checked("bf12act", "bf16act", "bf16act", "bf16", "--fast");
}

/* fp8 activations: f8sat's scale saturates the group; f8act's is the class's. Their per-row figure
 * (5e-2) is over --fast's 2e-2: only a looser --max-tolerance makes them candidates. */
Test(kbench, f8_activation_kernels_are_checked_per_output) {
    per_output_class_checked("f8sat", "f8act", "f8act", "f8", "--max-tolerance 5e-2");
}

/* --ops picks ops by glob (a library's wrong kernels elsewhere do not fail it); usage exits 2. */
Test(kbench, ops_glob_and_usage) {
    char a[512];
    snprintf(a, sizeof a, "-m %s --kernels kern_wrong --quick --max-mixed-tok 4 --ops 'rope' --json", tiny);
    cr_assert_eq(kbench(a), 0, "%s", slurp_file("err"));
    json_error_t je;
    json_t *j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(j, "rows"), i, r) cr_assert_str_eq(json_string_value(json_object_get(r, "op")), "rope");
    json_decref(j);
    snprintf(a, sizeof a, "-m %s --kernels kern_test --ops 'no_such_op*'", tiny);
    cr_assert_eq(kbench(a), 2);
    cr_assert(strstr(slurp_file("err"), "--ops 'no_such_op*': matches no op"), "%s", slurp_file("err"));
    cr_assert_eq(kbench("--kernels ref"), 2);
    snprintf(a, sizeof a, "-m %s --max-seqs 0", tiny);
    cr_assert_eq(kbench(a), 2);
    cr_assert(strstr(slurp_file("err"), "--max-seqs 0: expected a whole number in [1, 4096]"), "%s", slurp_file("err"));
    snprintf(a, sizeof a, "-m %s/missing.rad --kernels ref", dir);
    cr_assert_eq(kbench(a), 1);
    /* --buckets: only those row counts, each in its bucket; none held by any bucket is a mistake */
    snprintf(a, sizeof a, "-m %s --kernels ref --max-mixed-tok 16 --ops silu_mul --buckets 1,5,13 --json", tiny);
    cr_assert_eq(kbench(a), 0, "%s", slurp_file("err"));
    j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j);
    int seen = 0;
    json_array_foreach(json_object_get(j, "rows"), i, r) {
        const json_int_t n = json_integer_value(json_object_get(r, "rows"));
        cr_assert(n == 1 || n == 5 || n == 13, "a check at %lld rows", (long long)n);
        seen |= n == 1 ? 1 : n == 5 ? 2 : 4;
    }
    cr_assert_eq(seen, 7);
    json_decref(j);
    snprintf(a, sizeof a, "-m %s --kernels ref --max-mixed-tok 16 --buckets 17", tiny);
    cr_assert_eq(kbench(a), 2);
    cr_assert(strstr(slurp_file("err"), "--buckets: no bucket"), "%s", slurp_file("err"));
    snprintf(a, sizeof a, "-m %s --kernels ref --buckets 1,x", tiny);
    cr_assert_eq(kbench(a), 2);
    /* --bench: the report carries each kernel's time and both bounds' shares (their values are a
     * benchmark's, never asserted) */
    snprintf(a, sizeof a, "-m %s --kernels ref --max-mixed-tok 16 --ops 'gemm_nt' --buckets 1 --bench --report %s/b.md --json",
             tiny, dir);
    cr_assert_eq(kbench(a), 0, "%s", slurp_file("err"));
    j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j);
    cr_assert(json_real_value(json_object_get(j, "membw_gbs")) > 0 && json_real_value(json_object_get(j, "peak_gflops")) > 0);
    json_array_foreach(json_object_get(j, "rows"), i, r) {
        cr_assert_not_null(json_object_get(r, "flop_share"));
        cr_assert(json_real_value(json_object_get(r, "ns_median")) > 0);
    }
    json_decref(j);
    cr_assert(strstr(slurp_file("b.md"), "| time | GB/s | GFLOP/s | bound | flops |"), "%s", slurp_file("b.md"));
    /* --tp 2: every op at rank 0's shapes against rank 0's slices; the all-reduce run by both ranks
     * (rank r brings x * (r + 1)) and checked against their sum in rank order, both forms where the
     * wire may be lossy; the vocabulary-parallel embedding's part and the head's all_gather (each
     * rank its own columns, the whole row checked) */
    snprintf(a, sizeof a, "-m %s --kernels ref --tp 2 --tp-wire lossy --tp-wire-min-bytes 64 --buckets 2 --json", tiny);
    cr_assert_eq(kbench(a), 0, "%s", slurp_file("err"));
    j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j);
    int generic = 0, arrival = 0, gather = 0, part = 0;
    json_array_foreach(json_object_get(j, "rows"), i, r) {
        const char *k = json_string_value(json_object_get(r, "kernel"));
        cr_assert(json_is_true(json_object_get(r, "pass")), "%s failed", k);
        generic += k && strstr(k, "all_reduce:generic") != NULL, arrival += k && strstr(k, "all_reduce:arrival") != NULL;
        gather += k && strstr(k, "all_gather:") != NULL, part += k && strstr(k, "embed_gather_part:") != NULL;
    }
    cr_assert(generic > 0 && arrival > 0 && gather > 0 && part > 0, "generic %d, arrival %d, all_gather %d, embed part %d rows",
              generic, arrival, gather, part);
    json_decref(j);
}

/* libref on every op of the default model, at the served step bounds cut down to a few buckets
 * (quick mode; fewer still in the sanitizer build, whose kernels are ~15x slower). */
Test(kbench, ref_passes_on_the_default_model) {
    char a[512];
    snprintf(a, sizeof a, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s/s.rad >/dev/null 2>&1", build(), dir);
    cr_assert_eq(system(a), 0, "%s", a);
    const int san = getenv("RAD_ORACLE_QUICK") != NULL;
    snprintf(a, sizeof a, "-m %s/s.rad --kernels ref --quick --max-mixed-tok %d --ctx 320 --report %s/k.md", dir, san ? 2 : 16, dir);
    int rc = kbench_with(0, a);
    const char *err = slurp_file("err");
    cr_assert_eq(rc, 0, "exit %d\n%s", rc, err);
    cr_assert(strstr(err, "of 305 ops (ref): every kernel passes"), "%s", err);
    const char *md = slurp_file("k.md");
    static const char *ops[] = {"embed_gather", "rmsnorm", "gemm_nt3", "rope", "attn_paged", "gemm_nt", "add_rmsnorm",
                                "gemm_nt2", "silu_mul", "logits_gather", "logits_gemm", "argmax"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char h[64];
        snprintf(h, sizeof h, "\n## %s\n", ops[i]);
        cr_assert(strstr(md, h), "no table for %s", ops[i]);
    }
    cr_assert_null(strstr(md, "FAIL"));
}

/* rad-tune on the default model (its first attention norm: one op, every bucket) writes a table
 * that radiance reads under the same options, and `--debug-graph` says which buckets came from
 * it; every entry names a kernel rad-kbench passed (a failed one is left out). Usage: no -o. */
Test(kbench, rad_tune_writes_a_table_radiance_follows) {
    char a[1024];
    snprintf(a, sizeof a, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s/s.rad >/dev/null 2>&1", build(), dir);
    cr_assert_eq(system(a), 0, "%s", a);
    snprintf(a, sizeof a, "%s/rad-tune --plugin-dir %s/plugins -m %s/s.rad --kernels ref --quick --ops rmsnorm "
             "--max-mixed-tok 16 --ctx 320 -o %s/t.tune >%s/out 2>%s/err", build(), build(), dir, dir, dir, dir);
    int st = system(a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rad-tune: status %d\n%s", st, slurp_file("err"));
    cr_assert(strstr(slurp_file("err"), "entries (1 ops checked, 0 kernel checks failed"), "%s", slurp_file("err"));
    const char *t = slurp_file("t.tune");
    cr_assert(strncmp(t, "radiance-tune 1\n", 16) == 0 && strstr(t, "\nop index=1 name=rmsnorm ") && strstr(t, "\nend 5\n"),
              "%s", t);
    cr_assert(strstr(t, "options max_tok=16 "), "%s", t);
    /* radiance under the same options follows it (-p runs one sequence: max_seqs is not compared) */
    snprintf(a, sizeof a, "%s/radiance --plugin-dir %s/plugins --model %s/s.rad --kernels ref --batch 16 --ctx 320 "
             "--tune %s/t.tune --debug-graph >%s/out 2>%s/err", build(), build(), dir, dir, dir, dir);
    st = system(a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "radiance --tune: status %d\n%s", st, slurp_file("err"));
    const char *g = slurp_file("out");
    cr_assert(strstr(g, "tuning table ") && strstr(g, "(from the table, line 7)"), "%s", g);
    snprintf(a, sizeof a, "%s/rad-tune -m %s/s.rad >%s/out 2>%s/err", build(), dir, dir, dir);
    st = system(a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2 && strstr(slurp_file("err"), "-o OUT.tune is required"), "%s",
              slurp_file("err"));
}

/* The command line of rad-tune with args on the tiny Llama (libref, the step bounds below). */
static void tune_cmd(char *cmd, size_t n, const char *args) {
    snprintf(cmd, n, "%s/rad-tune --plugin-dir %s/plugins -m %s --kernels ref --quick --max-mixed-tok 16 --max-seqs 4 --ctx 320 %s",
             build(), build(), tiny, args);
}

/* It run; exit status; stdout and stderr in dir/out, dir/err. */
static int tune_tiny(const char *args) {
    char cmd[1024], line[1200];
    tune_cmd(cmd, sizeof cmd, args);
    snprintf(line, sizeof line, "%s >%s/out 2>%s/err", cmd, dir, dir);
    int st = system(line);
    cr_assert(WIFEXITED(st), "%s: killed", cmd);
    return WEXITSTATUS(st);
}

/* dir/out as JSON (asserted to parse); json_decref it. */
static json_t *out_json(void) {
    json_error_t je;
    json_t *j = json_loads(slurp_file("out"), 0, &je);
    cr_assert_not_null(j, "stdout is not JSON: %s\n%s", je.text, slurp_file("out"));
    return j;
}

static int file_has(const char *path, const char *s) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, s) != NULL;
}

/* Killed after its first op, rad-tune leaves OUT.partial; the next run takes the finished ops
 * from it and measures the rest, and the table has every entry a whole run writes. A line that
 * is not the journal's is refused naming it; a journal of other options is measured again. */
Test(kbench, rad_tune_resumes_after_a_kill) {
    char out[256], part[300], cmd[1024];
    snprintf(out, sizeof out, "%s/r.tune", dir);
    snprintf(part, sizeof part, "%s.partial", out);
    cr_assert_eq(tune_tiny("--restart -o /dev/null/x --json"), 1); /* cannot write the journal: named, exit 1 */
    cr_assert(strstr(slurp_file("err"), "/dev/null/x.partial"), "%s", slurp_file("err"));
    char whole[300];
    snprintf(whole, sizeof whole, "--json -o %s/whole.tune", dir);
    cr_assert_eq(tune_tiny(whole), 0, "%s", slurp_file("err"));
    json_t *jw = out_json();
    const json_int_t entries = json_integer_value(json_object_get(jw, "entries"));
    cr_assert(entries > 0 && json_integer_value(json_object_get(jw, "ops_resumed")) == 0);
    json_decref(jw);

    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char args[300], line[1200];
        snprintf(args, sizeof args, "-o %s", out);
        tune_cmd(cmd, sizeof cmd, args);
        snprintf(line, sizeof line, "exec %s >/dev/null 2>&1", cmd);
        execl("/bin/sh", "sh", "-c", line, (char *)NULL);
        _exit(127);
    }
    int seen = 0;
    for (int i = 0; i < 200000 && !seen; i++) { /* until its first op is journaled */
        seen = file_has(part, "\ndone op=");
        if (!seen) usleep(500);
    }
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(seen, "no journal appeared at %s", part);
    cr_assert(access(out, F_OK) != 0, "the run finished before the kill: the test did not test resuming");
    cr_assert(file_has(part, "radiance-tune-partial 1\n"), "a journal's head");

    /* a line the journal does not have: refused by name and line */
    snprintf(cmd, sizeof cmd, "cp %s %s.keep && printf 'garbage\\n' >> %s", part, part, part);
    cr_assert_eq(system(cmd), 0);
    char o_arg[300];
    snprintf(o_arg, sizeof o_arg, "-o %s", out);
    cr_assert_eq(tune_tiny(o_arg), 1);
    cr_assert(strstr(slurp_file("err"), ".partial:") && strstr(slurp_file("err"), "not a line of rad-tune's journal"), "%s",
              slurp_file("err"));
    /* a torn last line (no newline) is what a kill leaves: taken, its op measured again */
    snprintf(cmd, sizeof cmd, "cp %s.keep %s && printf 'row op=1 bucket=1..1 che' >> %s", part, part, part);
    cr_assert_eq(system(cmd), 0);
    snprintf(o_arg, sizeof o_arg, "-o %s --json", out);
    cr_assert_eq(tune_tiny(o_arg), 0, "%s", slurp_file("err"));
    cr_assert(strstr(slurp_file("err"), "ops already measured, resuming"), "%s", slurp_file("err"));
    json_t *jr = out_json();
    cr_assert(json_integer_value(json_object_get(jr, "ops_resumed")) > 0);
    cr_assert_eq(json_integer_value(json_object_get(jr, "entries")), entries, "a resumed table has a whole run's entries");
    json_decref(jr);
    cr_assert(access(part, F_OK) != 0, "the journal is removed once the table is written");
    RadTuneTable t;
    RadErr e = {0};
    cr_assert_eq(rad_tune_read(out, &t, &e), RAD_OK, "%s", e.msg);
    rad_tune_free(&t);

    /* a journal of other options (here --no-knobs) is not taken */
    snprintf(cmd, sizeof cmd, "cp %s.keep %s", part, part);
    cr_assert_eq(system(cmd), 0);
    snprintf(o_arg, sizeof o_arg, "-o %s --no-knobs", out);
    cr_assert_eq(tune_tiny(o_arg), 0, "%s", slurp_file("err"));
    cr_assert(strstr(slurp_file("err"), "is from another run") && !strstr(slurp_file("err"), "resuming"), "%s", slurp_file("err"));
}

/* The knob sweep runs each kernel at its other knob values (more checks than --no-knobs), and
 * radiance --debug-graph under the server's step bounds shows the table's choices. */
Test(kbench, rad_tune_sweeps_knobs_and_the_server_plan_follows) {
    char a[1024];
    snprintf(a, sizeof a, "--json --no-knobs -o %s/n.tune", dir);
    cr_assert_eq(tune_tiny(a), 0, "%s", slurp_file("err"));
    json_t *j = out_json();
    const json_int_t plain = json_integer_value(json_object_get(j, "checks"));
    cr_assert(json_is_false(json_object_get(j, "knobs")));
    json_decref(j);
    snprintf(a, sizeof a, "--json -o %s/k.tune", dir);
    cr_assert_eq(tune_tiny(a), 0, "%s", slurp_file("err"));
    j = out_json();
    static const char *keys[] = {"output", "model", "entries", "differ_from_default", "ops_checked", "ops_resumed", "checks",
                                 "checks_failed", "knobs", "quick", "max_tolerance", "seconds", "changed"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) cr_assert_not_null(json_object_get(j, keys[i]), "%s", keys[i]);
    cr_assert_gt(json_integer_value(json_object_get(j, "checks")), plain, "the knob values were not run");
    json_decref(j);
    snprintf(a, sizeof a, "%s/radiance --plugin-dir %s/plugins --model %s --kernels ref --max-seqs 4 --max-mixed-tok 16 --ctx 320 "
             "--tune %s/k.tune --debug-graph >%s/out 2>%s/err", build(), build(), tiny, dir, dir, dir);
    int st = system(a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "radiance --tune: status %d\n%s", st, slurp_file("err"));
    cr_assert(strstr(slurp_file("out"), "(from the table, line "), "%s", slurp_file("out"));
    /* the same table under the one-shot plan (one sequence, 512 tokens) is another option set: refused by name */
    snprintf(a, sizeof a, "%s/radiance --plugin-dir %s/plugins --model %s --kernels ref --ctx 320 --tune %s/k.tune --debug-graph "
             ">%s/out 2>%s/err", build(), build(), tiny, dir, dir, dir);
    st = system(a);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(slurp_file("err"), "max_tok"), "status %d\n%s", st,
              slurp_file("err"));
}
