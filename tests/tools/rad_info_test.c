/* rad-info end to end: the default model through GGUF, .rad and a pipe, JSON, --check. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "libcommon/format/rad_container.h"

#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static char dir[256];
static char bin[512];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(bin, sizeof bin, "%s/rad-info", b ? b : "build");
    snprintf(dir, sizeof dir, "/tmp/rad-info-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs a shell command with $BIN set; returns its exit status, stdout and stderr in buffers. */
static int run(const char *cmd, char **out, char **err) {
    char full[2048];
    snprintf(full, sizeof full, "BIN=%s; (%s) >%s/out 2>%s/err", bin, cmd, dir, dir);
    int st = system(full);
    char p[300];
    for (int k = 0; k < 2; k++) {
        char **dst = k ? err : out;
        if (!dst) continue;
        snprintf(p, sizeof p, "%s/%s", dir, k ? "err" : "out");
        FILE *f = fopen(p, "rb");
        cr_assert_not_null(f);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        *dst = calloc(1, (size_t)n + 1);
        cr_assert_eq(fread(*dst, 1, (size_t)n, f), (size_t)n);
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TestSuite(rad_info, .init = setup, .fini = teardown);

Test(rad_info, shows_the_default_model) {
    char *out, *err;
    cr_assert_eq(run("$BIN " MODEL, &out, &err), 0, "%s", err);
    const char *want[] = {"format      gguf v3", "arch_id       llama", "n_layers      30",
                          "n_embd        576",   "n_head        9",     "n_head_kv     3",
                          "head_dim      64",    "n_ff          1536",  "n_vocab       49152",
                          "n_ctx_train   8192",  "rope_theta    100000", "tokens        49152",
                          "merges        48900", "kind          chatml", "tensors       272",
                          "q4_1        210 tensors", "q8_0          1 tensors", "f32          61 tensors"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(out, want[i]) != NULL, "missing '%s' in:\n%s", want[i], out);
    free(out), free(err);
}

Test(rad_info, json_parses_with_stable_keys) {
    char *out, *err;
    cr_assert_eq(run("$BIN --json --tensors " MODEL, &out, &err), 0, "%s", err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert_not_null(j, "invalid JSON: %s", je.text);
    cr_assert_str_eq(json_string_value(json_object_get(j, "format")), "gguf");
    json_t *m = json_object_get(j, "model");
    cr_assert_eq(json_integer_value(json_object_get(m, "n_layers")), 30);
    cr_assert_eq(json_integer_value(json_object_get(m, "n_vocab")), 49152);
    cr_assert_eq(json_integer_value(json_object_get(m, "head_dim")), 64);
    json_t *ts = json_object_get(j, "tensors");
    cr_assert_eq(json_array_size(ts), 272);
    json_t *t0 = json_array_get(ts, 0);
    cr_assert_str_eq(json_string_value(json_object_get(t0, "name")), "token_embd.weight");
    cr_assert_str_eq(json_string_value(json_object_get(t0, "encoding")), "q8_0");
    json_t *sh = json_object_get(t0, "shape");
    cr_assert_eq(json_integer_value(json_array_get(sh, 0)), 49152);
    cr_assert_eq(json_integer_value(json_array_get(sh, 1)), 576);
    cr_assert_eq(json_integer_value(json_object_get(t0, "bytes")), 30081024);
    json_decref(j);
    free(out), free(err);
    /* jq reads it too, as scripts will */
    cr_assert_eq(run("$BIN --json " MODEL " | jq -e '.model.n_head_kv == 3'", &out, &err), 0, "%s", err);
    free(out), free(err);
}

/* The GGUF written as a .rad keeps every byte, and reads the same from a file and a pipe. */
Test(rad_info, rad_from_file_and_pipe_agree_and_check) {
    char path[300];
    snprintf(path, sizeof path, "%s/m.rad", dir);
    RadModelFile g, r;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(MODEL, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_model_write(&g, path, NULL, 0, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_model_open(path, &r, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(r.n_tensors, g.n_tensors);
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const RadTensor *a = &g.tensors[i], *b = rad_model_find(&r, a->name);
        cr_assert_not_null(b, "%s missing", a->name);
        cr_assert_eq(a->enc, b->enc);
        cr_assert_eq(a->rank, b->rank);
        cr_assert_eq(memcmp(a->shape, b->shape, a->rank * sizeof a->shape[0]), 0);
        cr_assert_eq(a->planes[0].nbytes, b->planes[0].nbytes);
        cr_assert_eq(memcmp(a->planes[0].data, b->planes[0].data, a->planes[0].nbytes), 0, "%s differs", a->name);
    }
    cr_assert_eq(r.meta.n, g.meta.n);
    cr_assert_eq(r.tok.n, g.tok.n);
    cr_assert_eq(r.chat.n, g.chat.n);
    rad_model_free(&g), rad_model_free(&r);

    char cmd[1024], *a, *b, *err;
    snprintf(cmd, sizeof cmd, "$BIN --json --tensors %s | jq 'del(.file)'", path);
    cr_assert_eq(run(cmd, &a, &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd, "cat %s | $BIN --json --tensors - | jq 'del(.file)'", path);
    cr_assert_eq(run(cmd, &b, &err), 0, "%s", err);
    cr_assert_str_eq(a, b);
    cr_assert(strstr(a, "\"n_layers\": 30") != NULL);
    free(a), free(b), free(err);

    snprintf(cmd, sizeof cmd, "$BIN --check %s && cat %s | $BIN --check -", path, path);
    cr_assert_eq(run(cmd, NULL, &err), 0, "%s", err);
    cr_assert(strstr(err, "all checksums match") != NULL, "%s", err);
    free(err);

    /* flip one byte deep in the data: --check names the tensor and exits 1 */
    snprintf(cmd, sizeof cmd, "printf '\\377' | dd of=%s bs=1 seek=50000000 conv=notrunc status=none && $BIN --check %s", path, path);
    cr_assert_eq(run(cmd, NULL, &err), 1, "%s", err);
    cr_assert(strstr(err, "checksum") && strstr(err, "blk."), "%s", err);
    free(err);
}

Test(rad_info, bad_inputs_get_one_line_errors) {
    char *err;
    cr_assert_eq(run("$BIN /nonexistent/x.gguf", NULL, &err), 1);
    cr_assert(strstr(err, "/nonexistent/x.gguf") && strchr(err, '\n') == err + strlen(err) - 1, "%s", err);
    free(err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "printf 'hello world, not a model' > %s/x.bin && $BIN %s/x.bin", dir, dir);
    cr_assert_eq(run(cmd, NULL, &err), 1);
    cr_assert(strstr(err, "x.bin") && strstr(err, "unknown format"), "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd, "head -c 100000 " MODEL " > %s/t.gguf && $BIN %s/t.gguf", dir, dir);
    cr_assert_eq(run(cmd, NULL, &err), 1);
    cr_assert(strstr(err, "t.gguf") && strstr(err, "truncated"), "%s", err);
    free(err);
    cr_assert_eq(run("head -c 5000 " MODEL " | $BIN -", NULL, &err), 1);
    cr_assert(strstr(err, "<stdin>") && strstr(err, "truncated"), "%s", err);
    free(err);
    cr_assert_eq(run("$BIN --frobnicate " MODEL, NULL, &err), 2);
    cr_assert(strstr(err, "--frobnicate") != NULL, "%s", err);
    free(err);
    cr_assert_eq(run("$BIN --check " MODEL, NULL, &err), 1);
    cr_assert(strstr(err, "--check needs a .rad") != NULL, "%s", err);
    free(err);
}

/* A full disk is an error, not a silent exit 0; --check does not run past it. */
Test(rad_info, stdout_to_a_full_disk_is_one_line_and_exit_1) {
    const char *cmds[] = {"$BIN --json --tensors " MODEL " >/dev/full", "$BIN " MODEL " >/dev/full",
                          "$BIN --plugins >/dev/full"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *err;
        cr_assert_eq(run(cmds[i], NULL, &err), 1, "%s: %s", cmds[i], err);
        cr_assert_str_eq(err, "rad-info: stdout: No space left on device\n", "%s", cmds[i]);
        free(err);
    }
}
