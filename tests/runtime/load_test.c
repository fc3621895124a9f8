/* Loading weights: checksums verified at load (copy and --mmap, raw and zstd planes, --no-verify),
 * the default copy reading the file once, a file that changes under --mmap (the identity check,
 * the step that fails closed, the scheduler that drains and returns, the SIGBUS guard), and a
 * vocabulary-only container refused as such. docs/TOOLS.md, "A file that changes under the server". */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/runtime/rad_engine_int.h" /* checks internals */
#include "libcommon/runtime/rad_sched.h"

#include "tests/tiny_llama.h"
#include "tests/test_util.h"

enum { L = 1, E = 32, H = 4, G = 2, HD = 8, FF = 48, V = 64 };

static char dir[256], path[300];

static void rnd(float *p, size_t n, unsigned *seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = ((float)((*seed >> 8) & 0xffff) / 65535.0f - 0.5f) * scale;
    }
}

static void add(RadWriter *w, const char *name, const float *d, uint32_t rank, uint64_t a, uint64_t b) {
    uint64_t shape[2] = {a, b};
    RadPlaneSrc p = {"data", d, (rank == 2 ? a * b : a) * sizeof(float)};
    RadErr e = {0};
    cr_assert_eq(rad_writer_add_tensor(w, name, RAD_ENC_F32, rank, shape, 1, &p, &e), RAD_OK, "%s", e.msg);
}

/* A one-layer Llama in f32. Norms are all ones, so with zstd they are stored compressed; the
 * random matrices stay raw. The file's times are set in the past, so any write moves mtime. */
static void write_model(const char *p, int zstd) {
    static float big[7][FF * E], emb[V * E], out[V * E], ones[E];
    unsigned seed = 11;
    for (int i = 0; i < 7; i++) rnd(big[i], FF * E, &seed, 0.4f);
    rnd(emb, V * E, &seed, 1.0f), rnd(out, V * E, &seed, 0.5f);
    for (int i = 0; i < E; i++) ones[i] = 1.0f;
    RadDict meta;
    RadErr e = {0};
    tiny_llama_meta(&meta, L, E, H, G, HD, FF, V, &e);
    RadWriter *w;
    RadWriteOpts o = {.zstd_level = zstd, .compress_min = 64};
    cr_assert_eq(rad_writer_init(&w, p, &o, 1, &e), RAD_OK, "%s", e.msg);
    rad_writer_set_kv(w, 0, &meta, &e);
    add(w, "tok_embd.weight", emb, 2, V, E);
    add(w, "output.weight", out, 2, V, E);
    add(w, "output_norm.weight", ones, 1, E, 0);
    add(w, "blk.0.attn_norm.weight", ones, 1, E, 0);
    add(w, "blk.0.attn_q.weight", big[0], 2, H * HD, E);
    add(w, "blk.0.attn_k.weight", big[1], 2, G * HD, E);
    add(w, "blk.0.attn_v.weight", big[2], 2, G * HD, E);
    add(w, "blk.0.attn_output.weight", big[3], 2, E, H * HD);
    add(w, "blk.0.ffn_norm.weight", ones, 1, E, 0);
    add(w, "blk.0.ffn_gate.weight", big[4], 2, FF, E);
    add(w, "blk.0.ffn_up.weight", big[5], 2, FF, E);
    add(w, "blk.0.ffn_down.weight", big[6], 2, E, FF);
    cr_assert_eq(rad_writer_finish(w, &e), RAD_OK, "%s", e.msg);
    rad_writer_free(w);
    rad_dict_free(&meta);
    struct timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, p, past, 0), 0);
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/rad-load-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m.rad", dir);
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static int open_engine(RadEngine **en, int mmap_weights, int no_verify, uint32_t threads, RadErr *e) {
    const char *b = getenv("RAD_BUILD");
    static char d1[256], d2[256];
    snprintf(d1, sizeof d1, "%s/test-plugins", b ? b : "build");
    snprintf(d2, sizeof d2, "%s/plugins", b ? b : "build");
    static const char *dirs[2] = {d1, d2};
    RadEngineOpts o = {.model = path, .plugin_dirs = dirs, .n_plugin_dirs = 2, .kernels = "kern_test", .max_tok = 16,
                       .max_seqs = 1, .max_ctx = 64, .n_threads = threads, .mmap_weights = mmap_weights,
                       .no_verify = no_verify};
    return rad_engine_open(en, &o, e);
}

/* Where a tensor's first plane lies in the file, and what the header says of it. */
static RadPlane plane_of(const char *tensor, uint64_t *file_off) {
    RadModelFile m;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(path, &m, &e), RAD_OK, "%s", e.msg);
    const RadTensor *t = rad_model_find(&m, tensor);
    cr_assert_not_null(t, "%s", tensor);
    RadPlane p = t->planes[0];
    *file_off = m.data_offset + p.offset;
    p.data = NULL;
    rad_model_free(&m);
    return p;
}

static void flip_byte(uint64_t off) {
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t c;
    cr_assert_eq(pread(fd, &c, 1, (off_t)off), 1);
    c ^= 0x01;
    cr_assert_eq(pwrite(fd, &c, 1, (off_t)off), 1);
    close(fd);
}

/* Replaces a plane's stored checksum in the header (the header's own checksum made right). */
static void patch_checksum(uint64_t sum) {
    size_t n;
    uint8_t *b = slurp(path, &n);
    uint64_t hb = 0;
    for (int i = 7; i >= 0; i--) hb = hb << 8 | b[16 + i];
    int found = 0;
    for (size_t i = 64; i + 8 <= 64 + hb && !found; i++) {
        uint64_t x = 0;
        for (int k = 7; k >= 0; k--) x = x << 8 | b[i + k];
        if (x != sum) continue;
        for (int k = 0; k < 8; k++) b[i + k] ^= (uint8_t)(k == 0);
        found = 1;
    }
    cr_assert(found, "checksum %016llx not in the header", (unsigned long long)sum);
    uint64_t h = XXH3_64bits(b + 64, hb);
    for (int i = 0; i < 8; i++) b[48 + i] = (uint8_t)(h >> (8 * i));
    FILE *f = fopen(path, "wb");
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

static void assert_one_line_naming(const char *msg, const char *tensor, const char *what) {
    cr_assert(strstr(msg, path) != NULL, "the file is not named: %s", msg);
    if (tensor) cr_assert(strstr(msg, tensor) != NULL, "the tensor is not named: %s", msg);
    cr_assert(strstr(msg, what) != NULL, "'%s' not said: %s", what, msg);
    cr_assert_null(strchr(msg, '\n'), "not one line: %s", msg);
}

TestSuite(load, .init = setup, .fini = teardown);

/* A flipped byte in a raw weight is refused at load, naming the file and the tensor, whether the
 * weights are copied or mapped and on one thread or two; --no-verify loads it. */
Test(load, a_flipped_weight_byte_is_refused_naming_the_tensor) {
    for (int mm = 0; mm < 2; mm++)
        for (uint32_t th = 1; th <= 2; th++) {
            write_model(path, 0);
            uint64_t off;
            plane_of("blk.0.ffn_down.weight", &off);
            flip_byte(off + 100);
            RadEngine *en = NULL;
            RadErr e = {0};
            cr_assert_eq(open_engine(&en, mm, 0, th, &e), RAD_E_CHECKSUM, "mmap %d threads %u: %s", mm, th, e.msg);
            assert_one_line_naming(e.msg, "'blk.0.ffn_down.weight'", "checksum mismatch");
            rad_engine_close(en);
            rad_err_clear(&e);
            cr_assert_eq(open_engine(&en, mm, 1, th, &e), RAD_OK, "--no-verify: %s", e.msg);
            rad_engine_close(en);
        }
}

/* A compressed plane is verified as it is decompressed: a wrong stored checksum is refused. */
Test(load, a_compressed_plane_is_verified_as_it_decompresses) {
    for (int mm = 0; mm < 2; mm++) {
        write_model(path, 3);
        uint64_t off;
        RadPlane p = plane_of("output_norm.weight", &off);
        cr_assert_eq(p.compression, RAD_COMP_ZSTD, "the norm of ones should compress");
        RadEngine *en = NULL;
        RadErr e = {0};
        cr_assert_eq(open_engine(&en, mm, 0, 2, &e), RAD_OK, "an intact zstd model: %s", e.msg);
        rad_engine_close(en);
        patch_checksum(p.checksum);
        cr_assert_eq(open_engine(&en, mm, 0, 2, &e), RAD_E_CHECKSUM, "mmap %d: %s", mm, e.msg);
        assert_one_line_naming(e.msg, "'output_norm.weight'", "checksum mismatch");
        rad_engine_close(en);
        rad_err_clear(&e);
        cr_assert_eq(open_engine(&en, mm, 1, 2, &e), RAD_OK, "--no-verify: %s", e.msg);
        rad_engine_close(en);
    }
}

static void forward(RadEngine *en, float *logits) {
    static const int32_t ids[5] = {1, 17, 5, 63, 22};
    RadErr e = {0};
    cr_assert_eq(rad_engine_forward(en, 0, ids, 5, 0, 1, &e), RAD_OK, "%s", e.msg);
    rad_engine_drop_seq(en, 0);
    memcpy(logits, rad_engine_logits(en, NULL), V * sizeof *logits);
}

/* Verification changes nothing it loads: the same logits bit for bit, verified or not, copied
 * or mapped, raw or zstd. */
Test(load, verified_and_unverified_loads_agree) {
    float ref[V], got[V];
    for (int z = 0; z < 2; z++) {
        write_model(path, 3 * z);
        for (int k = 0; k < 4; k++) {
            RadEngine *en = NULL;
            RadErr e = {0};
            cr_assert_eq(open_engine(&en, k & 1, k >> 1, 2, &e), RAD_OK, "%s", e.msg);
            forward(en, k ? got : ref);
            rad_engine_close(en);
            if (k) cr_assert_eq(memcmp(ref, got, sizeof ref), 0, "zstd %d, mmap %d, no_verify %d differs", z, k & 1, k >> 1);
        }
    }
}

/* The default copies every weight and drops the mapping: the file can be truncated or
 * rewritten under it and the answers do not change. */
Test(load, the_default_copy_reads_the_file_once) {
    write_model(path, 0);
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(open_engine(&en, 0, 0, 2, &e), RAD_OK, "%s", e.msg);
    for (int i = 0; i < en->m.n_ins; i++) cr_assert_null(en->m.ins[i].data, "the file is still mapped");
    cr_assert_eq(en->m.watch.on, 0, "the file's descriptor is still open");
    float a[V], b[V];
    forward(en, a);
    cr_assert_eq(truncate(path, 0), 0);
    forward(en, b);
    cr_assert_null(rad_engine_fail_closed(en));
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    rad_engine_close(en);
}

/* The identity check: a rename over the path or a hard link leaves the mapped inode as it was;
 * a write in place, a truncation or a chmod (which may hide a rewrite) is a change. */
Test(load, the_identity_check_sees_writes_and_truncation_not_renames) {
    char other[400], link2[400];
    snprintf(other, sizeof other, "%s/new.rad", dir);
    snprintf(link2, sizeof link2, "%s/link.rad", dir);
    write_model(path, 0);
    RadModelFile m;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(path, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.watch.on, 1);
    cr_assert_eq(rad_model_check_unchanged(&m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(link(path, link2), 0);
    cr_assert_eq(rad_model_check_unchanged(&m, &e), RAD_OK, "a hard link: %s", e.msg);
    write_model(other, 0);
    cr_assert_eq(rename(other, path), 0);
    cr_assert_eq(rad_model_check_unchanged(&m, &e), RAD_OK, "renamed over: %s", e.msg);
    rad_model_free(&m);

    for (int how = 0; how < 3; how++) {
        write_model(path, 0);
        cr_assert_eq(rad_model_open(path, &m, &e), RAD_OK, "%s", e.msg);
        cr_assert_eq(rad_model_check_unchanged(&m, &e), RAD_OK, "%s", e.msg);
        if (how == 0) {
            uint64_t off;
            plane_of("output.weight", &off);
            flip_byte(off);
        } else if (how == 1) {
            cr_assert_eq(truncate(path, 4096), 0);
        } else {
            cr_assert_eq(chmod(path, 0600), 0);
        }
        cr_assert_eq(rad_model_check_unchanged(&m, &e), RAD_E_IO, "change %d not seen", how);
        assert_one_line_naming(e.msg, NULL, "changed while mapped (--mmap)");
        cr_assert(strstr(e.msg, how == 0 ? "written in place" : how == 1 ? "size" : "ctime"), "%s", e.msg);
        rad_err_clear(&e);
        rad_model_free(&m);
    }
}

/* --mmap: a step after the file was written in place fails naming the file, and so does every
 * step after it (no answer from changed bytes); a rename over the path changes nothing. */
Test(load, a_mapped_engine_fails_closed_when_the_file_changes) {
    char other[400];
    snprintf(other, sizeof other, "%s/new.rad", dir);
    write_model(path, 0);
    RadEngine *en = NULL;
    RadErr e = {0};
    cr_assert_eq(open_engine(&en, 1, 0, 2, &e), RAD_OK, "%s", e.msg);
    float a[V], b[V];
    forward(en, a);
    write_model(other, 0);
    cr_assert_eq(rename(other, path), 0);
    forward(en, b);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    cr_assert_null(rad_engine_fail_closed(en));
    rad_engine_close(en);

    write_model(path, 0);
    cr_assert_eq(open_engine(&en, 1, 0, 2, &e), RAD_OK, "%s", e.msg);
    forward(en, a);
    uint64_t off;
    plane_of("output.weight", &off);
    flip_byte(off);
    static const int32_t ids[1] = {3};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rad_engine_forward(en, 0, ids, 1, 0, 1, &e), RAD_E_IO, "step %d after the write ran", i);
        assert_one_line_naming(e.msg, NULL, "changed while mapped (--mmap): written in place");
        rad_err_clear(&e);
    }
    cr_assert_not_null(rad_engine_fail_closed(en));
    cr_assert(strstr(rad_engine_fail_closed(en), "changed while mapped"));
    rad_engine_close(en);
}

/* Runs fn in a child with stderr on a pipe; returns the wait status and what it wrote. */
static int in_child(void (*fn)(void), char *err, size_t cap) {
    int pf[2];
    cr_assert_eq(pipe(pf), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(pf[1], 2);
        close(pf[0]);
        fn();
        _exit(0);
    }
    close(pf[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(pf[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(pf[0]);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return st;
}

static void child_reads_a_truncated_mapping(void) {
    RadModelFile m;
    RadErr e = {0};
    if (rad_model_open(path, &m, &e)) _exit(10);
    if (rad_model_guard(&m, "changed while mapped (--mmap): truncated (SIGBUS reading the weights)") < 0) _exit(11);
    if (truncate(path, 0)) _exit(12);
    volatile uint8_t x = m.ins[0].data[m.ins[0].size - 1]; /* past the new end: SIGBUS */
    (void)x;
    _exit(13);
}

static void child_faults_outside_the_guard(void) {
    RadModelFile m;
    RadErr e = {0};
    char other[400];
    snprintf(other, sizeof other, "%s/other.bin", dir);
    if (rad_model_open(path, &m, &e)) _exit(10);
    if (rad_model_guard(&m, "guarded") < 0) _exit(11);
    int fd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 8192)) _exit(12);
    volatile uint8_t *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED || ftruncate(fd, 0)) _exit(12);
    uint8_t x = p[100]; /* a fault in memory the guard does not cover */
    (void)x;
    _exit(13);
}

static void child_is_sent_sigbus(void) {
    RadModelFile m;
    RadErr e = {0};
    if (rad_model_open(path, &m, &e)) _exit(10);
    if (rad_model_guard(&m, "guarded") < 0) _exit(11);
    kill(getpid(), SIGBUS); /* sent, not a fault: it must still kill */
    _exit(13);
}

/* A read of the weights past a truncation ends in one line naming the file and exit status
 * RAD_EXIT_MODEL_CHANGED, not a death by SIGBUS; a fault anywhere else is still a SIGBUS. */
Test(load, sigbus_in_the_mapping_exits_with_one_line_and_the_documented_status) {
    write_model(path, 0);
    char err[2048];
    int st = in_child(child_reads_a_truncated_mapping, err, sizeof err);
    cr_assert(WIFEXITED(st), "died by signal %d, stderr: %s", WIFSIGNALED(st) ? WTERMSIG(st) : 0, err);
    cr_assert_eq(WEXITSTATUS(st), RAD_EXIT_MODEL_CHANGED, "exit %d, stderr: %s", WEXITSTATUS(st), err);
    cr_assert(strstr(err, path) && strstr(err, "changed while mapped (--mmap): truncated"), "%s", err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);

    write_model(path, 0);
    st = in_child(child_faults_outside_the_guard, err, sizeof err);
    cr_assert(!(WIFEXITED(st) && (WEXITSTATUS(st) == RAD_EXIT_MODEL_CHANGED || WEXITSTATUS(st) >= 10)),
              "a fault outside the weights was taken for the guard's, or went unnoticed (exit %d): %s", WEXITSTATUS(st), err);
    cr_assert_null(strstr(err, "guarded"), "%s", err);

    st = in_child(child_is_sent_sigbus, err, sizeof err);
    cr_assert(!(WIFEXITED(st) && (WEXITSTATUS(st) == RAD_EXIT_MODEL_CHANGED || WEXITSTATUS(st) >= 10)),
              "a SIGBUS sent with kill was taken for the guard's, or swallowed (exit %d): %s", WEXITSTATUS(st), err);
}

/* rad-convert --vocab-only writes a container with no tensors: the engine says so. */
Test(load, a_vocabulary_only_container_is_refused_as_such) {
    RadDict meta, tok;
    rad_dict_init(&meta), rad_dict_init(&tok);
    RadErr e = {0};
    rad_dict_set_str(&meta, "model.arch_id", "llama", &e);
    rad_dict_set_str(&meta, "model.quant", "q4_1", &e);
    const char *toks[] = {"a", "b"};
    rad_dict_set_strarr(&tok, "tokenizer.tokens", toks, 2, &e);
    rad_dict_set_str(&tok, "tokenizer.model", "gpt2", &e);
    RadWriter *w;
    cr_assert_eq(rad_writer_init(&w, path, NULL, 1, &e), RAD_OK, "%s", e.msg);
    rad_writer_set_kv(w, 0, &meta, &e);
    rad_writer_set_kv(w, 1, &tok, &e);
    cr_assert_eq(rad_writer_finish(w, &e), RAD_OK, "%s", e.msg);
    rad_writer_free(w);
    rad_dict_free(&meta), rad_dict_free(&tok);
    RadEngine *en = NULL;
    cr_assert_eq(open_engine(&en, 0, 0, 1, &e), RAD_E_UNSUPPORTED);
    assert_one_line_naming(e.msg, NULL, "this container holds no weights (vocabulary only)");
    rad_engine_close(en);
}

/* ---- the scheduler on SmolLM2 under --mmap: the file written in place mid-generation --------- */

typedef struct Fin {
    pthread_mutex_t mu;
    int n_done, n_tokens[2];
    RadGenFinish finish[2];
    char msg[2][512];
} Fin;
static Fin fin = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void sink(void *user, const RadGenEvent *ev) {
    int i = (int)(intptr_t)user;
    pthread_mutex_lock(&fin.mu);
    if (ev->finish == RAD_FINISH_NONE) fin.n_tokens[i]++;
    else {
        fin.finish[i] = ev->finish;
        snprintf(fin.msg[i], sizeof fin.msg[i], "%s", ev->msg ? ev->msg : "");
        fin.n_done++;
    }
    pthread_mutex_unlock(&fin.mu);
}

static void *run_sched(void *s) {
    rad_sched_run(s);
    return NULL;
}

/* Two requests in flight when the file is written in place: both end with the error naming the
 * file, no token comes after the change, later submits are refused, and rad_sched_run returns by
 * itself so the server can exit RAD_EXIT_MODEL_CHANGED. */
Test(load, the_scheduler_fails_closed_and_returns_when_the_mapped_file_changes) {
    test_deadline(120);
    const char *b = getenv("RAD_BUILD");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/rad-convert models/SmolLM2-135M-Instruct.Q4_1.gguf -o %s --force 2>&1", b ? b : "build", path);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    struct timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, path, past, 0), 0);
    static char d[256];
    snprintf(d, sizeof d, "%s/plugins", b ? b : "build");
    static const char *dirs[1] = {d};
    RadEngineOpts o = {.model = path, .plugin_dirs = dirs, .n_plugin_dirs = 1, .kernels = "ref", .max_tok = 32, .max_seqs = 2,
                       .max_ctx = 256, .n_threads = 2, .mmap_weights = 1};
    RadEngine *en = NULL;
    RadTok *tok;
    RadSched *s;
    RadErr e = {0};
    cr_assert_eq(rad_engine_open(&en, &o, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_tok_init(&tok, rad_engine_tok_data(en), &e), RAD_OK, "%s", e.msg);
    RadSchedOpts so = {.max_seqs = 2, .max_mixed_tok = 32};
    cr_assert_eq(rad_sched_open(&s, en, tok, &so, &e), RAD_OK, "%s", e.msg);
    int32_t prompt[4] = {1, 2, 3, 4};
    RadGenReq r = {.prompt = prompt, .n_prompt = 4, .sp = rad_sampler_defaults(), .max_tokens = 200, .ignore_eos = 1};
    r.sp.temperature = 0;
    uint64_t id[2];
    for (int i = 0; i < 2; i++) cr_assert_eq(rad_sched_submit(s, &r, sink, (void *)(intptr_t)i, &id[i], &e), RAD_OK, "%s", e.msg);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, run_sched, s), 0);
    for (;;) { /* both generating */
        pthread_mutex_lock(&fin.mu);
        int go = fin.n_tokens[0] >= 2 && fin.n_tokens[1] >= 2;
        pthread_mutex_unlock(&fin.mu);
        if (go) break;
        usleep(1000);
    }
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    uint8_t c;
    cr_assert_eq(pread(fd, &c, 1, 1 << 20), 1);
    cr_assert_eq(pwrite(fd, &c, 1, 1 << 20), 1); /* the same byte: only mtime says it was written */
    close(fd);
    pthread_join(th, NULL); /* returns by itself: no rad_sched_stop */
    cr_assert_eq(fin.n_done, 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fin.finish[i], RAD_FINISH_ERROR, "request %d finished %d", i, fin.finish[i]);
        assert_one_line_naming(fin.msg[i], NULL, "changed while mapped (--mmap): written in place");
        cr_assert_lt(fin.n_tokens[i], 200);
    }
    cr_assert_not_null(rad_engine_fail_closed(en));
    cr_assert_neq(rad_sched_submit(s, &r, sink, (void *)(intptr_t)0, &id[0], &e), RAD_OK, "admitted after the change");
    rad_sched_close(s);
    rad_tok_free(tok);
    rad_engine_close(en);
}

/* rad_model_find goes through a name index (a scan per lookup made a file of many tensors
 * quadratic in the engine's and the planner's lookups): every name found, the first of a
 * repeated name wins as the scan did, an absent name is NULL, and a rolled-back add (a loader
 * that failed part way sets n_tensors back) is not found. */
Test(load, tensor_names_indexed) {
    RadModelFile m;
    memset(&m, 0, sizeof m);
    RadErr e = {0};
    cr_assert_null(rad_model_find(&m, "a"));
    const uint64_t n = 100000;
    char name[32];
    for (uint64_t i = 0; i < n; i++) {
        RadTensor t;
        memset(&t, 0, sizeof t);
        snprintf(name, sizeof name, "blk.%" PRIu64 ".w", i % (n - 10)); /* the last ten repeat names */
        t.name = strdup(name);
        t.rank = 1, t.shape[0] = i;
        cr_assert_eq(rad_model_add_tensor(&m, &t, &e), RAD_OK, "%s", e.msg);
    }
    for (uint64_t i = 0; i < n - 10; i++) {
        snprintf(name, sizeof name, "blk.%" PRIu64 ".w", i);
        const RadTensor *t = rad_model_find(&m, name);
        cr_assert_not_null(t, "%s", name);
        cr_assert_eq(t->shape[0], i, "%s: the first of the name, not a later repeat", name);
    }
    cr_assert_null(rad_model_find(&m, "blk.99990.w"));
    cr_assert_null(rad_model_find(&m, ""));
    /* a rolled-back add */
    RadTensor t;
    memset(&t, 0, sizeof t);
    t.name = strdup("late");
    cr_assert_eq(rad_model_add_tensor(&m, &t, &e), RAD_OK);
    cr_assert_not_null(rad_model_find(&m, "late"));
    free(m.tensors[--m.n_tensors].name);
    cr_assert_null(rad_model_find(&m, "late"));
    rad_model_free(&m);
}
