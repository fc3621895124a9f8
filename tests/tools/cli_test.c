/* The tools' command lines: rad_num (the one strict parser for every number a user gives), the
 * numeric flags of every tool refusing nan/inf/hex/blank/out-of-range values by name with exit 2,
 * --set typed by its key and given once, stdout writes checked (/dev/full, a closed pipe), and
 * rad-convert removing its temporary on SIGTERM/SIGINT/SIGHUP. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/base/rad_num.h"
#include "tests/test_util.h"

#define GGUF "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define TINY "tests/fixtures/tiny-llama-bf16"

/* ---- rad_num ------------------------------------------------------------------------------ */

static void f64_refused(const char *s, double lo, double hi, int whole) {
    RadErr e = {0};
    double v = 12345;
    cr_assert_eq(rad_num_f64("--x", s, lo, hi, whole, &v, &e), RAD_E_ARG, "'%s' was accepted as %g", s, v);
    cr_assert_eq(v, 12345, "'%s': the output was written on failure", s);
    cr_assert(strncmp(e.msg, "--x ", 4) == 0 && !strchr(e.msg, '\n'), "'%s': %s", s, e.msg);
}

static double f64_ok(const char *s, double lo, double hi, int whole) {
    RadErr e = {0};
    double v = NAN;
    cr_assert_eq(rad_num_f64("--x", s, lo, hi, whole, &v, &e), RAD_OK, "'%s': %s", s, e.msg);
    return v;
}

Test(rad_num, refuses_what_is_not_a_finite_decimal) {
    static const char *bad[] = {"nan", "NaN", "-nan", "+nan", "nan(1)", "inf", "-inf", "INF", "infinity", "1e309", "-1e309",
                                "0x10", "0X1p3", "0b1", " 1", "1 ", "\t1", "1\n", "", "+", "-", ".", "e5", "1e", "1e+",
                                "1.5.2", "1,5", "1_000", "--1", "+-1", "1e5x", "\xd9\xa1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) f64_refused(bad[i], -1e300, 1e300, RAD_NUM_REAL);
    RadErr e = {0};
    double v;
    cr_assert_eq(rad_num_f64("--x", NULL, 0, 1, RAD_NUM_REAL, &v, &e), RAD_E_ARG);
}

Test(rad_num, accepts_decimals_within_inclusive_bounds) {
    cr_assert_eq(f64_ok("0", 0, 1, RAD_NUM_REAL), 0);
    cr_assert_eq(f64_ok("-0", 0, 1, RAD_NUM_REAL), 0);
    cr_assert_eq(f64_ok("+1", 0, 1, RAD_NUM_REAL), 1);
    cr_assert_eq(f64_ok("1.5", 0, 2, RAD_NUM_REAL), 1.5);
    cr_assert_eq(f64_ok(".5", 0, 2, RAD_NUM_REAL), 0.5);
    cr_assert_eq(f64_ok("5.", 0, 6, RAD_NUM_REAL), 5);
    cr_assert_eq(f64_ok("1e3", 0, 1000, RAD_NUM_REAL), 1000);
    cr_assert_eq(f64_ok("1E-3", 0, 1, RAD_NUM_REAL), 1e-3);
    cr_assert_eq(f64_ok("1e-9", 1e-9, 1, RAD_NUM_REAL), 1e-9); /* the bounds themselves are in */
    cr_assert_eq(f64_ok("-100", -100, 100, RAD_NUM_REAL), -100);
    cr_assert_eq(f64_ok("1e-400", 0, 1, RAD_NUM_REAL), 0); /* underflow is a real value, not an error */
    f64_refused("0.99e-9", 1e-9, 1, RAD_NUM_REAL);
    f64_refused("1.0000001", 0, 1, RAD_NUM_REAL);
    f64_refused("-100.5", -100, 100, RAD_NUM_REAL);
    f64_refused("-1", 0, 1, RAD_NUM_REAL);
}

Test(rad_num, whole_refuses_fractions) {
    f64_refused("1.5", 0, 10, RAD_NUM_WHOLE);
    f64_refused("0.1", 0, 10, RAD_NUM_WHOLE);
    f64_refused("1e-1", 0, 10, RAD_NUM_WHOLE);
    cr_assert_eq(f64_ok("2.0", 0, 10, RAD_NUM_WHOLE), 2);
    cr_assert_eq(f64_ok("1e3", 0, 1e9, RAD_NUM_WHOLE), 1000);
    cr_assert_eq(f64_ok("65535", 0, 65535, RAD_NUM_WHOLE), 65535);
    f64_refused("65536", 0, 65535, RAD_NUM_WHOLE);
    RadErr e = {0};
    double v;
    rad_num_f64("--max-conns", "1.5", 1, 1048576, RAD_NUM_WHOLE, &v, &e);
    cr_assert_str_eq(e.msg, "--max-conns 1.5: expected a whole number in [1, 1048576]");
}

Test(rad_num, message_is_one_short_line_with_readable_bounds) {
    RadErr e = {0};
    double v;
    rad_num_f64("--top-p", "nan", 1e-9, 1, RAD_NUM_REAL, &v, &e);
    cr_assert_str_eq(e.msg, "--top-p nan: expected a number in [1e-09, 1]");
    rad_err_clear(&e);
    rad_num_f64("--temp", "", 0, 100, RAD_NUM_REAL, &v, &e);
    cr_assert_str_eq(e.msg, "--temp '': expected a number in [0, 100]");
    rad_err_clear(&e);
    rad_num_f64("--temp", "1\n2\r3", 0, 100, RAD_NUM_REAL, &v, &e);
    cr_assert_str_eq(e.msg, "--temp 1?2?3: expected a number in [0, 100]");
    rad_err_clear(&e);
    char big[600];
    memset(big, '9', sizeof big - 1);
    big[sizeof big - 1] = 0;
    rad_num_f64("--temp", big, 0, 100, RAD_NUM_REAL, &v, &e);
    cr_assert(strstr(e.msg, "...: expected") && strlen(e.msg) < 120, "%s", e.msg);
}

Test(rad_num, u64_takes_the_full_range_and_nothing_else) {
    RadErr e = {0};
    uint64_t v = 7;
    cr_assert_eq(rad_num_u64("--seed", "18446744073709551615", 0, UINT64_MAX, &v, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq(rad_num_u64("--seed", "0", 0, UINT64_MAX, &v, &e), RAD_OK);
    cr_assert_eq(v, 0);
    static const char *bad[] = {"18446744073709551616", "99999999999999999999999", "-1", "+1", " 1", "1 ", "",
                                "1.0", "1e3", "0x10", "abc", "nan", "inf"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rad_err_clear(&e);
        v = 7;
        cr_assert_eq(rad_num_u64("--seed", bad[i], 0, UINT64_MAX, &v, &e), RAD_E_ARG, "'%s' accepted", bad[i]);
        cr_assert_eq(v, 7);
        cr_assert(strncmp(e.msg, "--seed ", 7) == 0, "%s", e.msg);
    }
    cr_assert_eq(rad_num_u64("--zstd", "19", 1, 19, &v, &e), RAD_OK);
    cr_assert_eq(rad_num_u64("--zstd", "1", 1, 19, &v, &e), RAD_OK);
    rad_err_clear(&e);
    cr_assert_eq(rad_num_u64("--zstd", "20", 1, 19, &v, &e), RAD_E_ARG);
    cr_assert_str_eq(e.msg, "--zstd 20: expected a whole number in [1, 19]");
    rad_err_clear(&e);
    cr_assert_eq(rad_num_u64("--zstd", "0", 1, 19, &v, &e), RAD_E_ARG);
}

Test(rad_num, check_refuses_non_finite_and_out_of_range) {
    RadErr e = {0};
    cr_assert_eq(rad_num_check("'top_p'", NAN, 0, 1, RAD_NUM_REAL, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "'top_p'") != NULL, "%s", e.msg);
    cr_assert_eq(rad_num_check("'top_p'", INFINITY, 0, 1e308, RAD_NUM_REAL, NULL), RAD_E_ARG);
    cr_assert_eq(rad_num_check("'top_p'", -INFINITY, -1e308, 0, RAD_NUM_REAL, NULL), RAD_E_ARG);
    cr_assert_eq(rad_num_check("'n'", 1.5, 0, 10, RAD_NUM_WHOLE, NULL), RAD_E_ARG);
    cr_assert_eq(rad_num_check("'n'", 11, 0, 10, RAD_NUM_WHOLE, NULL), RAD_E_ARG);
    cr_assert_eq(rad_num_check("'n'", 10, 0, 10, RAD_NUM_WHOLE, NULL), RAD_OK);
    cr_assert_eq(rad_num_check("'p'", 1e-300, 0, 1, RAD_NUM_REAL, NULL), RAD_OK);
}

/* ---- the tools ------------------------------------------------------------------------------ */

static char dir[256];

static void setup(void) {
    test_deadline(300);
    snprintf(dir, sizeof dir, "/tmp/rad-cli-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *bin(const char *tool) {
    static char b[8][512];
    static int k;
    const char *d = getenv("RAD_BUILD");
    char *p = b[k++ % 8];
    snprintf(p, 512, "%s/%s", d && *d ? d : "build", tool);
    return p;
}

typedef struct Run {
    int status;     /* the exit status, or -N when killed by signal N */
    char err[4096]; /* stderr */
} Run;

/* Starts argv with signals at their defaults (a test runner may ignore SIGPIPE), stdin from
 * `in` (NULL: /dev/null), stdout to out_path (NULL: /dev/null) or to out_fd when >= 0, stderr to
 * a file; returns its pid. */
static pid_t start(const char *const *argv, const char *in, const char *out_path, int out_fd) {
    char inp[300], errp[300];
    snprintf(inp, sizeof inp, "%s/stdin", dir);
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    FILE *f = fopen(inp, "wb");
    cr_assert_not_null(f);
    if (in) fputs(in, f);
    fclose(f);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
        int i0 = open(inp, O_RDONLY), o1 = out_fd >= 0 ? out_fd : open(out_path ? out_path : "/dev/null", O_WRONLY),
            e2 = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (i0 < 0 || o1 < 0 || e2 < 0) _exit(126);
        dup2(i0, 0), dup2(o1, 1), dup2(e2, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static Run finish(pid_t pid) {
    Run r = {0};
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
    char errp[300];
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    FILE *f = fopen(errp, "rb");
    cr_assert_not_null(f);
    size_t n = fread(r.err, 1, sizeof r.err - 1, f);
    r.err[n] = 0;
    fclose(f);
    return r;
}

static Run run(const char *const *argv, const char *in, const char *out_path) {
    return finish(start(argv, in, out_path, -1));
}

static int one_line(const char *s) {
    size_t n = strlen(s);
    return n > 1 && s[n - 1] == '\n' && strchr(s, '\n') == s + n - 1;
}

/* An exit status `want` with one line on stderr holding every `need` (NULL-terminated). */
static void expect(const Run *r, int want, const char *const *need, const char *what) {
    cr_assert_eq(r->status, want, "%s: status %d, expected %d; stderr: %s", what, r->status, want, r->err);
    cr_assert(one_line(r->err), "%s: stderr is not one line: %s", what, r->err);
    for (; need && *need; need++) cr_assert(strstr(r->err, *need), "%s: '%s' not in: %s", what, *need, r->err);
}

static int dir_has(const char *prefix) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix))) found = 1;
    closedir(d);
    return found;
}

TestSuite(cli, .init = setup, .fini = teardown); /* setup sets each test's deadline (300 s) */

static const char *const BAD_ANY[] = {"nan", "-nan", "inf", "-inf", "1e309", "0x10", "", "1 ", " 1", "abc", "1,5", NULL};

Test(cli, radiance_numeric_flags_refuse_bad_values_by_name) {
    static const struct { const char *flag; int whole, neg_ok; } flags[] = {
        {"-n", 1, 0}, {"--temp", 0, 0}, {"--top-k", 1, 0}, {"--top-p", 0, 0}, {"--min-p", 0, 0},
        {"--repeat-penalty", 0, 0}, {"--presence-penalty", 0, 1}, {"--frequency-penalty", 0, 1},
        {"--threads", 1, 0}, {"--ctx", 1, 0}, {"--batch", 1, 0}, {"--port", 1, 0}, {"--max-body", 1, 0},
        {"--max-header", 1, 0}, {"--max-conns", 1, 0}, {"--idle-timeout", 1, 0}, {"--max-seqs", 1, 0},
        {"--kv-blocks", 1, 0}, {"--max-mixed-tok", 1, 0}, {"--max-queue", 1, 0}, {"--drain-timeout", 1, 0},
        {"--header-timeout", 0, 0}, {"--body-timeout", 0, 0}, {"--seed", 1, 0},
    };
    char model[300];
    /* --tokenize: a value let through ends at the missing model (exit 1), never as a server */
    snprintf(model, sizeof model, "%s/none.rad", dir);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *vals[24];
        int n = 0;
        for (const char *const *v = BAD_ANY; *v; v++) vals[n++] = *v;
        vals[n++] = "1e30";
        if (flags[i].whole) vals[n++] = "1.5";
        if (!flags[i].neg_ok) vals[n++] = "-1";
        for (int k = 0; k < n; k++) {
            const char *argv[] = {bin("radiance"), "--model", model, "--tokenize", flags[i].flag, vals[k], NULL};
            Run r = run(argv, NULL, NULL);
            char what[128];
            snprintf(what, sizeof what, "radiance %s '%s'", flags[i].flag, vals[k]);
            const char *need[] = {flags[i].flag, "expected a ", NULL};
            expect(&r, 2, need, what);
        }
    }
}

Test(cli, radiance_seed_takes_the_whole_u64_range) {
    char model[300];
    snprintf(model, sizeof model, "%s/none.rad", dir);
    const char *argv[] = {bin("radiance"), "--model", model, "--tokenize", "--seed", "18446744073709551616", NULL};
    Run r = run(argv, NULL, NULL);
    const char *need[] = {"--seed 18446744073709551616", NULL};
    expect(&r, 2, need, "--seed 2^64");
    argv[5] = "18446744073709551615"; /* parsed; the missing model is the error */
    r = run(argv, NULL, NULL);
    const char *need2[] = {"none.rad", NULL};
    expect(&r, 1, need2, "--seed 2^64-1");
}

Test(cli, radiance_ids_are_strict) {
    char model[300];
    snprintf(model, sizeof model, "%s/none.rad", dir);
    static const char *bad[] = {"1,abc", "0x10", "1.5", "-1", "+1", "2147483648", "99999999999999999999", ",", "", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {bin("radiance"), "--model", model, "--ids", bad[i], NULL};
        Run r = run(argv, NULL, NULL);
        const char *need[] = {"--ids", NULL};
        expect(&r, 2, need, bad[i]);
    }
    const char *argv[] = {bin("radiance"), "--model", model, "--ids", "1, 2,3 2147483647", NULL};
    Run r = run(argv, NULL, NULL);
    const char *need[] = {"none.rad", NULL};
    expect(&r, 1, need, "good ids");
}

Test(cli, rad_convert_zstd_and_align_refuse_bad_values) {
    char out[300];
    snprintf(out, sizeof out, "%s/o.rad", dir);
    static const char *const flags[] = {"--zstd", "--align"};
    static const char *const extra[] = {"1.5", "-1", "0", "20", "96", "4", "2097152", NULL};
    for (int f = 0; f < 2; f++) {
        const char *const *lists[] = {BAD_ANY, extra};
        for (int l = 0; l < 2; l++)
            for (const char *const *v = lists[l]; *v; v++) {
                if (f == 0 && !strcmp(*v, "4")) continue; /* a zstd level */
                const char *argv[] = {bin("rad-convert"), "--no-tokenizer", TINY, "-o", out, flags[f], *v, NULL};
                Run r = run(argv, NULL, NULL);
                char what[64];
                snprintf(what, sizeof what, "%s '%s'", flags[f], *v);
                const char *need[] = {flags[f], NULL};
                expect(&r, 2, need, what);
                cr_assert(!dir_has("o.rad"), "%s left a file", what);
            }
    }
    const char *argv[] = {bin("rad-convert"), "--no-tokenizer", TINY, "-o", out, "--zstd", "3", "--align", "4096", NULL};
    Run r = run(argv, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
}

Test(cli, rad_convert_set_is_typed_by_its_key_and_given_once) {
    char out[300];
    snprintf(out, sizeof out, "%s/v.rad", dir);
    const char *twice[] = {bin("rad-convert"), GGUF, "--vocab-only", "-o", out, "--set", "model.name=a", "--set", "model.name=b", NULL};
    Run r = run(twice, NULL, NULL);
    const char *need[] = {"--set model.name", "twice", NULL};
    expect(&r, 2, need, "--set twice");
    /* model.rope_theta is f32 in the source: its value must be a finite number */
    static const char *bad[] = {"nan", "inf", "-inf", "1e309", "0x10", "", "fast"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "model.rope_theta=%s", bad[i]);
        const char *argv[] = {bin("rad-convert"), GGUF, "--vocab-only", "-o", out, "--set", arg, NULL};
        r = run(argv, NULL, NULL);
        const char *need2[] = {"--set model.rope_theta", NULL};
        expect(&r, 2, need2, arg);
        cr_assert(!dir_has("v.rad"), "%s left a file", arg);
    }
    static const char *bad_u32[] = {"model.n_layers=1.5", "model.n_layers=-1", "model.n_layers=4294967296",
                                    "model.n_layers=nan", "model.n_ctx_train=1e3"};
    for (size_t i = 0; i < sizeof bad_u32 / sizeof bad_u32[0]; i++) {
        const char *argv[] = {bin("rad-convert"), GGUF, "--plan-only", "--set", bad_u32[i], NULL};
        r = run(argv, NULL, NULL);
        const char *need2[] = {"--set model.n_", NULL};
        expect(&r, 2, need2, bad_u32[i]);
    }
    const char *good[] = {bin("rad-convert"), GGUF, "--vocab-only", "-o", out, "--set", "model.rope_theta=5e5",
                          "--set", "model.name=nan", NULL};
    r = run(good, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    RadModelFile m;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(out, &m, &e), RAD_OK, "%s", e.msg);
    const RadValue *t = rad_dict_get(&m.meta, "model.rope_theta"), *nm = rad_dict_get(&m.meta, "model.name");
    cr_assert(t && t->type == RAD_VAL_F32 && t->v.f == 5e5, "model.rope_theta not f32 5e5");
    cr_assert(nm && nm->type == RAD_VAL_STRING && !strcmp(nm->v.s.p, "nan"), "model.name is a string key");
    rad_model_free(&m);
}

Test(cli, rad_convert_set_keys_are_checked) {
    char longkey[400];
    memset(longkey, 'k', 300);
    strcpy(longkey + 300, "=1");
    const char *cases[][2] = {{longkey, "longer than 255"}, {"=x", "expected KEY=VALUE"}, {"novalue", "expected KEY=VALUE"},
                              {"a\x01b=1", "control character"}, {"\xff\xfe=1", "not UTF-8"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[] = {bin("rad-convert"), GGUF, "--plan-only", "--set", cases[i][0], NULL};
        Run r = run(argv, NULL, NULL);
        const char *need[] = {"--set", cases[i][1], NULL};
        expect(&r, 2, need, cases[i][1]);
    }
    /* 64 --set are taken, a 65th is refused */
    const char *argv[3 + 2 * 65 + 1] = {bin("rad-convert"), GGUF, "--plan-only"};
    static char keys[65][16];
    for (int i = 0; i < 65; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d=v", i);
        argv[3 + 2 * i] = "--set";
        argv[4 + 2 * i] = keys[i];
    }
    argv[3 + 2 * 64] = NULL;
    Run r = run(argv, NULL, NULL);
    cr_assert_eq(r.status, 0, "64 --set refused: %s", r.err);
    argv[3 + 2 * 64] = "--set";
    argv[3 + 2 * 65] = NULL;
    r = run(argv, NULL, NULL);
    const char *need[] = {"--set k64", "more than 64", NULL};
    expect(&r, 2, need, "65 --set");
}

/* A full disk: every tool's stdout to /dev/full is exit 1 and one line naming stdout. */
static void full(const char *const *argv, const char *in, const char *what) {
    Run r = run(argv, in, "/dev/full");
    const char *need[] = {"stdout: ", "No space left on device", NULL};
    expect(&r, 1, need, what);
}

Test(cli, stdout_to_a_full_disk_fails_every_tool) {
    const char *a1[] = {bin("rad-info"), "--json", "--tensors", GGUF, NULL};
    full(a1, NULL, "rad-info --json");
    const char *a2[] = {bin("rad-info"), GGUF, NULL};
    full(a2, NULL, "rad-info");
    const char *a3[] = {bin("rad-info"), "--plugins", NULL};
    full(a3, NULL, "rad-info --plugins");
    const char *a4[] = {bin("rad-info"), "--help", NULL};
    full(a4, NULL, "rad-info --help");
    const char *a5[] = {bin("rad-convert"), "--no-tokenizer", TINY, "-o", "-", NULL};
    full(a5, NULL, "rad-convert -o -");
    const char *a6[] = {bin("rad-convert"), GGUF, "--plan-only", "-v", NULL};
    full(a6, NULL, "rad-convert --plan-only -v");
    const char *a7[] = {bin("rad-convert"), "--help", NULL};
    full(a7, NULL, "rad-convert --help");
    const char *a8[] = {bin("radiance"), "--help", NULL};
    full(a8, NULL, "radiance --help");
    char tok[300];
    snprintf(tok, sizeof tok, "%s/tok.rad", dir);
    const char *conv[] = {bin("rad-convert"), GGUF, "--vocab-only", "-o", tok, NULL};
    Run r = run(conv, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *t1[] = {bin("radiance"), "--model", tok, "--tokenize", NULL};
    full(t1, "Hello world", "radiance --tokenize");
    const char *t2[] = {bin("radiance"), "--model", tok, "--detokenize", NULL};
    full(t2, "19556 905", "radiance --detokenize");
}

/* The one-shot paths need a model with weights and a tokenizer: SmolLM2, converted once. */
Test(cli, radiance_one_shot_stops_at_the_first_failed_write) {
    char m[300];
    snprintf(m, sizeof m, "%s/m.rad", dir);
    const char *conv[] = {bin("rad-convert"), GGUF, "-o", m, NULL};
    Run r = run(conv, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *p1[] = {bin("radiance"), "--model", m, "-p", "Once upon a time", "-n", "8", "--temp", "0", NULL};
    full(p1, NULL, "radiance -p");
    const char *p2[] = {bin("radiance"), "--model", m, "--ids", "1,2,3", "-n", "8", "--print-ids", NULL};
    full(p2, NULL, "radiance --print-ids");
    const char *p3[] = {bin("radiance"), "--model", m, "--debug-graph", NULL};
    full(p3, NULL, "radiance --debug-graph");
    /* a closed pipe: EPIPE is an error (exit 1, one line), not a death by SIGPIPE, and it stops
     * generating (n 100000 would take minutes; the suite's timeout catches one that goes on) */
    int pp[2];
    cr_assert_eq(pipe(pp), 0);
    close(pp[0]);
    const char *p4[] = {bin("radiance"), "--model", m, "-p", "Once upon a time", "-n", "100000", "--ctx", "8192", NULL};
    pid_t pid = start(p4, NULL, NULL, pp[1]);
    close(pp[1]);
    r = finish(pid);
    const char *need[] = {"radiance: stdout: Broken pipe", NULL};
    expect(&r, 1, need, "radiance -p to a closed pipe");
}

/* Reads the ids --print-ids wrote to path (one a line): their count, the first max into ids. */
static int read_ids(const char *path, int *ids, int max) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    int n = 0, v;
    while (fscanf(f, "%d", &v) == 1) {
        if (n < max) ids[n] = v;
        n++;
    }
    fclose(f);
    return n;
}

/* --ignore-eos (a benchmark's tg128, as llama-bench): a prompt whose greedy continuation ends
 * at EOS after a few tokens goes on to exactly -n tokens, the EOS among them, the same tokens
 * before it. */
Test(cli, radiance_ignore_eos_generates_exactly_n) {
    char m[300], o1[300], o2[300];
    snprintf(m, sizeof m, "%s/m.rad", dir);
    snprintf(o1, sizeof o1, "%s/ids1", dir);
    snprintf(o2, sizeof o2, "%s/ids2", dir);
    for (int i = 0; i < 2; i++) { /* run() writes stdout into an existing file */
        FILE *f = fopen(i ? o2 : o1, "w");
        cr_assert_not_null(f);
        fclose(f);
    }
    const char *conv[] = {bin("rad-convert"), GGUF, "-o", m, NULL};
    Run r = run(conv, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *a[] = {bin("radiance"), "--model", m, "--ids", "27690", "-n", "64", "--temp", "0", "--print-ids", NULL};
    r = run(a, NULL, o1);
    cr_assert_eq(r.status, 0, "%s", r.err);
    const char *b[] = {bin("radiance"), "--model", m, "--ids", "27690", "-n", "64", "--temp", "0", "--print-ids", "--ignore-eos", NULL};
    r = run(b, NULL, o2);
    cr_assert_eq(r.status, 0, "%s", r.err);
    int x[64], y[64];
    const int n1 = read_ids(o1, x, 64), n2 = read_ids(o2, y, 64);
    cr_assert(n1 < 64, "the prompt's continuation should end at EOS before 64 tokens (it gave %d)", n1);
    cr_assert_eq(n2, 64, "--ignore-eos: %d tokens, not -n 64", n2);
    for (int i = 0; i < n1; i++) cr_assert_eq(y[i], x[i], "token %d: %d with --ignore-eos, %d without", i, y[i], x[i]);
    cr_assert_eq(y[n1], 2, "token %d: %d, not SmolLM2's EOS (2)", n1, y[n1]);
}

Test(cli, rad_convert_to_a_closed_pipe_is_an_error) {
    int pp[2];
    cr_assert_eq(pipe(pp), 0);
    close(pp[0]);
    const char *argv[] = {bin("rad-convert"), "--no-tokenizer", TINY, "-o", "-", NULL};
    pid_t pid = start(argv, NULL, NULL, pp[1]);
    close(pp[1]);
    Run r = finish(pid);
    const char *need[] = {"rad-convert: stdout: ", "Broken pipe", NULL};
    expect(&r, 1, need, "rad-convert -o - to a closed pipe");
}

/* SIGTERM/SIGINT/SIGHUP while the temporary is being written: no file is left, and the status
 * is death by that signal. --zstd 19 makes the write long, so the signal lands mid-write. */
static void killed_mid_write(int sig) {
    char out[300];
    snprintf(out, sizeof out, "%s/o.rad", dir);
    const char *argv[] = {bin("rad-convert"), GGUF, "-o", out, "--zstd", "19", NULL};
    pid_t pid = start(argv, NULL, NULL, -1);
    int seen = 0;
    for (int i = 0; i < 60000 && !seen; i++) { /* bounded: 10 minutes of 10 ms polls */
        seen = dir_has("o.rad.tmp.");
        int st;
        if (!seen && waitpid(pid, &st, WNOHANG) == pid) cr_assert_fail("rad-convert ended before writing: status %d", st);
        if (!seen) usleep(10000);
    }
    cr_assert(seen, "no temporary appeared");
    cr_assert_eq(kill(pid, sig), 0);
    Run r = finish(pid);
    cr_assert_eq(r.status, -sig, "status %d, expected death by signal %d: %s", r.status, sig, r.err);
    cr_assert(!dir_has("o.rad"), "signal %d left a file beside %s", sig, out);
}

Test(cli, rad_convert_sigterm_leaves_no_file) { killed_mid_write(SIGTERM); }
Test(cli, rad_convert_sigint_leaves_no_file) { killed_mid_write(SIGINT); }
Test(cli, rad_convert_sighup_leaves_no_file) { killed_mid_write(SIGHUP); }

/* ---- the deployment switches (docs/PLUGINS.md, "Probe bits") ------------------------------ */

#define CVEC "tests/fixtures/cvec/" /* scripts/make-cvec-fixtures.py: SmolLM2's n_embd 576, 30 layers */

/* An empty file at path (run() writes stdout into an existing file). */
static void empty(const char *path) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    fclose(f);
}

/* SmolLM2 as a container in the test's folder: served by llama_ggml (an imported q4_1). */
static const char *smollm2(void) {
    static char m[300];
    snprintf(m, sizeof m, "%s/m.rad", dir);
    const char *argv[] = {bin("rad-convert"), GGUF, "-o", m, NULL};
    Run r = run(argv, NULL, NULL);
    cr_assert_eq(r.status, 0, "rad-convert: %s", r.err);
    return m;
}

/* The server refuses a switch on Gemma 3 (the brief's case: gemma3_ggml) with its one line and
 * exit 1, before announcing that it listens. */
#define GEMMA3 "models/gemma-3-270m-q4_k_m.gguf"
Test(cli, server_refuses_a_switch_in_one_line_on_gemma3) {
    if (access(GEMMA3, R_OK) != 0) cr_skip_test("Gemma 3 270M not fetched (make models)");
    char m[300];
    snprintf(m, sizeof m, "%s/g.rad", dir);
    const char *cv[] = {bin("rad-convert"), GEMMA3, "-o", m, NULL};
    Run r = run(cv, NULL, NULL);
    cr_assert_eq(r.status, 0, "rad-convert: %s", r.err);
    const char *sv[] = {bin("radiance"), "--model", m, "--host", "127.0.0.1", "--port", "0", "--kv-cache-dtype", "fp8_v4", NULL};
    r = run(sv, NULL, NULL);
    const char *need[] = {"radiance: --kv-cache-dtype fp8_v4: plugin 'gemma3_ggml' does not serve it", NULL};
    expect(&r, 1, need, "the server, --kv-cache-dtype fp8_v4 on gemma3");
}

/* the switches llama_ggml does not grant (--control-vector it serves: control_vector_is_served) */
static const char *const SWITCHES[][2] = {{"--kv-cache-dtype", "fp8_v4"}, {"--kv-cache-dtype", "fp8_k6v4"},
                                          {"--tp-attn-split", "rows"}, {"--state-cache-dtype", "f16"},
                                          {"--kv-resident", "4"}};

Test(cli, deployment_switches_refused_naming_the_plugin_and_the_flag) {
    const char *m = smollm2();
    char out[300];
    snprintf(out, sizeof out, "%s/out", dir);
    for (size_t i = 0; i < sizeof SWITCHES / sizeof SWITCHES[0]; i++) {
        const char *flag = SWITCHES[i][0], *val = SWITCHES[i][1];
        char named[64]; /* the fp8 layouts are named with their value */
        snprintf(named, sizeof named, "%s%s%s", flag, strncmp(val, "fp8", 3) ? "" : " ", strncmp(val, "fp8", 3) ? "" : val);
        const char *argv[] = {bin("radiance"), "--model", m, "-p", "hi", "-n", "1", flag, val, NULL};
        empty(out);
        Run r = run(argv, NULL, out);
        const char *need[] = {named, "plugin 'llama_ggml'", "probe bit is 0", NULL};
        expect(&r, 1, need, named);
        FILE *f = fopen(out, "rb");
        cr_assert_not_null(f);
        cr_assert_eq(fgetc(f), EOF, "%s: something was generated", named);
        fclose(f);
        /* the server: the same one line, nothing about listening or stopping around it */
        const char *sv[] = {bin("radiance"), "--model", m, "--host", "127.0.0.1", "--port", "0", flag, val, NULL};
        r = run(sv, NULL, NULL);
        expect(&r, 1, need, named);
        /* rad-kbench and rad-tune declare the same program: the same refusal, no table written */
        char tune[300];
        snprintf(tune, sizeof tune, "%s/t.tune", dir);
        const char *kb[] = {bin("rad-kbench"), "-m", m, "--quick", flag, val, NULL};
        r = run(kb, NULL, NULL);
        expect(&r, 1, need, named);
        const char *tu[] = {bin("rad-tune"), "-m", m, "-o", tune, "--quick", flag, val, NULL};
        r = run(tu, NULL, NULL);
        expect(&r, 1, need, named);
        cr_assert(!dir_has("t.tune"), "%s: rad-tune wrote a table", named);
    }
}

Test(cli, deployment_switches_refuse_bad_values_naming_the_flag_and_the_value) {
    static const char *const bad[][2] = {
        {"--kv-cache-dtype", "fp9"}, {"--kv-cache-dtype", "FP8_V4"}, {"--kv-cache-dtype", ""}, {"--kv-cache-dtype", "f16 "},
        {"--kv-cache-dtype", "fp8"}, {"--tp-attn-split", "heads"}, {"--tp-attn-split", "Rows"}, {"--tp-attn-split", ""},
        {"--state-cache-dtype", "bf16"}, {"--state-cache-dtype", "fp16"}, {"--state-cache-dtype", ""},
        {"--kv-resident", "0"}, {"--kv-resident", "-1"}, {"--kv-resident", "1.5"}, {"--kv-resident", "nan"},
        {"--kv-resident", "16777217"}, {"--kv-resident", ""}, {"--control-vector", ""}, {"--tp", "0"}, {"--tp", "65"},
        {"--tp", "1.5"}, {"--tp", ""}, {"--tp-wire", "fast"}, {"--tp-wire", ""}, {"--tp-wire-min-bytes", "0"},
        {"--tp-wire-min-bytes", "x"}};
    char model[300];
    snprintf(model, sizeof model, "%s/none.rad", dir); /* refused before the model is opened */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int t = 0; t < 3; t++) {
            const char *tool = t == 0 ? "radiance" : t == 1 ? "rad-kbench" : "rad-tune";
            const char *argv[] = {bin(tool), t ? "-m" : "--model", model, bad[i][0], bad[i][1], t == 2 ? "-o" : NULL,
                                  "/nonexistent/t.tune", NULL};
            Run r = run(argv, NULL, NULL);
            char what[128], val[64];
            snprintf(what, sizeof what, "%s %s '%s'", tool, bad[i][0], bad[i][1]);
            snprintf(val, sizeof val, "'%s'", bad[i][1]);
            const int numeric = !strcmp(bad[i][0], "--kv-resident") || !strcmp(bad[i][0], "--tp") ||
                                !strcmp(bad[i][0], "--tp-wire-min-bytes"),
                      empty = !*bad[i][1];
            const char *need[] = {bad[i][0], numeric || empty ? bad[i][1] : val, NULL};
            expect(&r, 2, need, what);
        }
    static const char *const both[][4] = {{"--kv-type", "f16", "--kv-cache-dtype", "f16"},
                                          {"--kv-cache-dtype", "fp8_v4", "--kv-type", "f32"}};
    for (size_t i = 0; i < 2; i++) {
        const char *argv[] = {bin("radiance"), "--model", model, "-p", "x", both[i][0], both[i][1], both[i][2], both[i][3], NULL};
        Run r = run(argv, NULL, NULL);
        const char *need[] = {"--kv-type and --kv-cache-dtype: give one of them", NULL};
        expect(&r, 2, need, both[i][0]);
    }
}

Test(cli, kv_cache_dtype_f16_serves_as_kv_type_f16) {
    const char *m = smollm2();
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    empty(a), empty(b);
    const char *pa[] = {bin("radiance"), "--model", m, "-p", "The capital of France is", "-n", "8", "--temp", "0",
                        "--kv-cache-dtype", "f16", NULL};
    Run r = run(pa, NULL, a);
    cr_assert_eq(r.status, 0, "--kv-cache-dtype f16: %s", r.err);
    const char *pb[] = {bin("radiance"), "--model", m, "-p", "The capital of France is", "-n", "8", "--temp", "0",
                        "--kv-type", "f16", NULL};
    r = run(pb, NULL, b);
    cr_assert_eq(r.status, 0, "--kv-type f16: %s", r.err);
    char ta[512] = {0}, tb[512] = {0};
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    cr_assert(fa && fb);
    size_t na = fread(ta, 1, sizeof ta - 1, fa), nb = fread(tb, 1, sizeof tb - 1, fb);
    fclose(fa), fclose(fb);
    cr_assert_gt(na, strlen("The capital of France is"), "nothing generated: '%s'", ta);
    cr_assert(na == nb && !memcmp(ta, tb, na), "--kv-cache-dtype f16 '%s' != --kv-type f16 '%s'", ta, tb);
    /* and the KV group is declared at f16: half the f32 cache's bytes */
    const char *pl[] = {bin("radiance"), "--model", m, "--debug-placement", "--kv-cache-dtype", "f16", NULL};
    empty(a);
    r = run(pl, NULL, a);
    cr_assert_eq(r.status, 0, "%s", r.err);
    fa = fopen(a, "rb");
    cr_assert_not_null(fa);
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, fa))
        if (strstr(line, "kv group 'kv'")) {
            found = 1;
            cr_assert(strstr(line, "12288 bytes per block per layer"), "%s", line);
        }
    fclose(fa);
    cr_assert(found, "no kv group line in --debug-placement");
}

/* llama_ggml grants --control-vector: radiance generates with it and --debug-graph shows the
 * steered layers (good.gguf: directions for layers 1 and 29); tests/runtime/oracle_test.c checks
 * the text against transformers. */
Test(cli, control_vector_is_served) {
    const char *m = smollm2();
    const char *argv[] = {bin("radiance"), "--model", m, "-p", "hi", "-n", "1", "--control-vector", CVEC "good.gguf", NULL};
    Run r = run(argv, NULL, NULL);
    cr_assert_eq(r.status, 0, "radiance --control-vector: %s", r.err);
    char out[300], cmd[2048];
    snprintf(out, sizeof out, "%s/graph", dir);
    empty(out);
    const char *dg[] = {bin("radiance"), "--model", m, "--control-vector", CVEC "good.gguf", "--debug-graph", NULL};
    r = run(dg, NULL, out);
    cr_assert_eq(r.status, 0, "%s", r.err);
    snprintf(cmd, sizeof cmd, "grep -q 'control vector: 2 of 30 layers steered' %s && grep -q 'add_bias *cvec.direction.1(f32)' %s && "
             "grep -q 'add_bias *cvec.direction.29(f32)' %s && test $(grep -c 'add_bias' %s) = 2", out, out, out, out);
    cr_assert_eq(system(cmd), 0, "--debug-graph does not show layers 1 and 29 steered (see %s)", out);
}

Test(cli, control_vector_file_is_read_and_checked_before_the_probe) {
    const char *m = smollm2();
    static const char *const bad[][2] = {
        {"missing.gguf", "No such file"},          {"bad-len.gguf", "'direction.1': 575 values, the model's n_embd is 576"},
        {"bad-layer0.gguf", "'direction.0': layer 0 is outside 1..29"}, {"bad-layer30.gguf", "'direction.30': layer 30"},
        {"bad-name.gguf", "'bias.1' is not a direction.L tensor"},     {"bad-f16.gguf", "'direction.1': expected one f32"},
        {"bad-nan.gguf", "'direction.1': value 7 is not finite"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[300];
        snprintf(path, sizeof path, CVEC "%s", bad[i][0]);
        const char *argv[] = {bin("radiance"), "--model", m, "-p", "hi", "-n", "1", "--control-vector", path, NULL};
        Run r = run(argv, NULL, NULL);
        const char *need[] = {"--control-vector", path, bad[i][1], NULL};
        expect(&r, 1, need, bad[i][0]);
        cr_assert(!strstr(r.err, "llama_ggml"), "%s: refused by the probe before the file was checked: %s", bad[i][0], r.err);
    }
    const char *argv[] = {bin("radiance"), "--model", m, "-p", "hi", "-n", "1", "--control-vector", m, NULL};
    Run r = run(argv, NULL, NULL);
    const char *need[] = {"--control-vector", "a rad file; expected llama.cpp's control-vector GGUF", NULL};
    expect(&r, 1, need, "a .rad as a control vector");
}
