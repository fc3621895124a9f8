/* The .rad container: writer/reader round trips, streaming, and every malformed header. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "libcommon/format/rad_container.h"
#include "tests/test_util.h"

static char tmpdir[256];

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rad-test-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

static float F32DATA[6 * 64];
static uint8_t Q8DATA[4 * 34];
static uint8_t PLANE_A[256], PLANE_B[64];

/* A small model: every metadata type, three tensors (one two-plane), optionally compressed. */
static int write_sample(const char *path, int zstd, uint32_t align, RadErr *e) {
    for (int i = 0; i < 6 * 64; i++) F32DATA[i] = (float)i * 0.25f - 3.0f;
    for (size_t i = 0; i < sizeof Q8DATA; i++) Q8DATA[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof PLANE_A; i++) PLANE_A[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof PLANE_B; i++) PLANE_B[i] = (uint8_t)(255 - i);
    RadDict meta, tok, chat;
    rad_dict_init(&meta), rad_dict_init(&tok), rad_dict_init(&chat);
    rad_dict_set_str(&meta, "model.arch_id", "llama", e);
    rad_dict_set_str(&meta, "model.name", "sample", e);
    rad_dict_set_u32(&meta, "model.n_layers", 2, e);
    rad_dict_set_u32(&meta, "model.n_embd", 64, e);
    rad_dict_set_u32(&meta, "model.head_dim", 16, e);
    rad_dict_set_f32(&meta, "model.rms_eps", 1e-5f, e);
    rad_dict_set_f32(&meta, "model.rope_theta", 100000.0f, e);
    rad_dict_set_bool(&meta, "model.tie_embeddings", true, e);
    rad_dict_set_u64(&meta, "free.u64", UINT64_MAX, e);
    rad_dict_set_i32(&meta, "free.i32", -7, e);
    int32_t ia[3] = {1, -2, 3};
    rad_dict_set_arr(&meta, "free.i32s", RAD_VAL_I32, ia, 3, e);
    const char *toks[] = {"<s>", "a", "b", "ab"};
    rad_dict_set_strarr(&tok, "tokenizer.tokens", toks, 4, e);
    rad_dict_set_str(&tok, "tokenizer.model", "gpt2", e);
    rad_dict_set_i32(&tok, "tokenizer.bos_id", 0, e);
    rad_dict_set_str(&chat, "chat.kind", "chatml", e);
    RadWriter *w;
    RadWriteOpts o = {.alignment = align, .zstd_level = zstd, .compress_min = 64};
    int rc = rad_writer_init(&w, path, &o, 1, e);
    if (rc) return rc;
    rc = rad_writer_set_kv(w, 0, &meta, e);
    if (!rc) rc = rad_writer_set_kv(w, 1, &tok, e);
    if (!rc) rc = rad_writer_set_kv(w, 2, &chat, e);
    uint64_t s1[2] = {6, 64}, s2[2] = {4, 32}, s3[1] = {320};
    RadPlaneSrc p1 = {"data", F32DATA, sizeof F32DATA}, p2 = {"data", Q8DATA, sizeof Q8DATA};
    RadPlaneSrc p3[2] = {{"codes", PLANE_A, sizeof PLANE_A}, {"scale", PLANE_B, sizeof PLANE_B}};
    if (!rc) rc = rad_writer_add_tensor(w, "blk.0.w", RAD_ENC_F32, 2, s1, 1, &p1, e);
    if (!rc) rc = rad_writer_add_tensor(w, "tok_embd", RAD_ENC_Q8_0, 2, s2, 1, &p2, e);
    if (!rc) rc = rad_writer_add_tensor(w, "two.planes", RAD_ENC_U8, 1, s3, 2, p3, e);
    if (!rc) rc = rad_writer_finish(w, e);
    rad_writer_free(w);
    rad_dict_free(&meta), rad_dict_free(&tok), rad_dict_free(&chat);
    return rc;
}

static void check_sample(RadModelFile *m, int mapped) {
    cr_assert_str_eq(m->format, "rad");
    RadModelMeta mm;
    RadErr e = {0};
    cr_assert_eq(rad_model_meta(m, &mm, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(mm.arch_id, "llama");
    cr_assert_eq(mm.n_layers, 2);
    cr_assert_eq(mm.head_dim, 16);
    cr_assert_float_eq(mm.rope_theta, 100000.0f, 1e-3);
    const RadValue *v = rad_dict_get(&m->meta, "free.u64");
    cr_assert(v && v->type == RAD_VAL_U64 && v->v.u == UINT64_MAX);
    v = rad_dict_get(&m->meta, "free.i32s");
    cr_assert(v && v->type == RAD_VAL_ARRAY && v->arr_type == RAD_VAL_I32 && v->n == 3);
    cr_assert_eq(((int32_t *)v->v.arr)[1], -2);
    v = rad_dict_get(&m->tok, "tokenizer.tokens");
    cr_assert(v && v->n == 4);
    cr_assert_str_eq(((RadStr *)v->v.arr)[3].p, "ab");
    const char *k;
    cr_assert_eq(rad_dict_gets(&m->chat, "chat.kind", &k, &e), RAD_OK);
    cr_assert_str_eq(k, "chatml");
    cr_assert_eq(m->n_tensors, 3);
    const RadTensor *t = rad_model_find(m, "tok_embd");
    cr_assert_not_null(t);
    cr_assert_eq(t->enc, RAD_ENC_Q8_0);
    cr_assert(t->rank == 2 && t->shape[0] == 4 && t->shape[1] == 32);
    if (!mapped) return;
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadTensor *x = &m->tensors[i];
        cr_assert_eq(x->planes[0].offset % m->alignment, 0);
        for (uint32_t j = 0; j < x->n_planes; j++) {
            uint8_t *buf = malloc(x->planes[j].nbytes);
            cr_assert_eq(rad_plane_read(m, x, j, buf, &e), RAD_OK, "%s", e.msg);
            const void *want = i == 0 ? (const void *)F32DATA : i == 1 ? (const void *)Q8DATA : j == 0 ? (const void *)PLANE_A : (const void *)PLANE_B;
            cr_assert_eq(memcmp(buf, want, x->planes[j].nbytes), 0, "tensor %s plane %u differs", x->name, j);
            free(buf);
        }
    }
    cr_assert_eq(rad_container_check(m, NULL, NULL, &e), RAD_OK, "%s", e.msg);
}

TestSuite(container, .init = setup, .fini = teardown);

Test(container, round_trip_plain_and_zstd_at_several_alignments) {
    int zs[2] = {0, 3};
    uint32_t al[3] = {8, 64, 4096};
    for (int z = 0; z < 2; z++)
        for (int a = 0; a < 3; a++) {
            char p[300];
            path_in(p, sizeof p, "m.rad");
            RadErr e = {0};
            cr_assert_eq(write_sample(p, zs[z], al[a], &e), RAD_OK, "%s", e.msg);
            RadModelFile m;
            cr_assert_eq(rad_model_open(p, &m, &e), RAD_OK, "%s", e.msg);
            cr_assert_eq(m.alignment, al[a]);
            check_sample(&m, 1);
            if (zs[z]) { /* F32DATA compresses: stored smaller than logical */
                const RadTensor *t = rad_model_find(&m, "blk.0.w");
                cr_assert_eq(t->planes[0].compression, RAD_COMP_ZSTD);
                cr_assert_lt(t->planes[0].stored_bytes, t->planes[0].nbytes);
            }
            rad_model_free(&m);
        }
}

Test(container, reads_header_and_checks_from_a_pipe) {
    char p[300];
    path_in(p, sizeof p, "m.rad");
    RadErr e = {0};
    cr_assert_eq(write_sample(p, 3, 64, &e), RAD_OK, "%s", e.msg);
    int fd = open(p, O_RDONLY);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) { /* a writer process, so the reader sees a real pipe */
        close(pfd[0]);
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0)
            if (write(pfd[1], buf, (size_t)n) != n) _exit(1);
        _exit(0);
    }
    close(pfd[1]);
    close(fd);
    RadIn in;
    rad_in_init_fd(&in, pfd[0], "<pipe>");
    RadModelFile m;
    cr_assert_eq(rad_container_load(&in, &m, &e), RAD_OK, "%s", e.msg);
    check_sample(&m, 0);
    cr_assert_eq(rad_container_check(&m, NULL, NULL, &e), RAD_OK, "%s", e.msg);
    rad_model_free(&m);
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
}

static uint8_t *sample_bytes(size_t *n, int zstd) {
    char p[300];
    path_in(p, sizeof p, "s.rad");
    RadErr e = {0};
    cr_assert_eq(write_sample(p, zstd, 8, &e), RAD_OK, "%s", e.msg);
    return slurp(p, n);
}

/* Loads a buffer as a container; returns the status and leaves the message in e. */
static int load_buf(const uint8_t *b, size_t n, RadErr *e) {
    RadIn in;
    rad_in_init_mem(&in, b, n, "bad.rad");
    RadModelFile m;
    int rc = rad_container_load(&in, &m, e);
    if (rc == RAD_OK) rc = rad_container_check(&m, NULL, NULL, e);
    rad_model_free(&m);
    return rc;
}

static void fix_header_checksum(uint8_t *b) {
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | b[16 + i];
    uint64_t s = XXH3_64bits(b + 64, h);
    for (int i = 0; i < 8; i++) b[48 + i] = (uint8_t)(s >> (8 * i));
}

static uint8_t *find(uint8_t *b, size_t n, const char *needle, size_t nl) {
    for (size_t i = 0; i + nl <= n; i++)
        if (memcmp(b + i, needle, nl) == 0) return b + i;
    return NULL;
}

Test(container, every_truncation_is_a_named_format_error) {
    for (int z = 0; z < 2; z++) {
        size_t n;
        uint8_t *b = sample_bytes(&n, z * 3);
        for (size_t cut = 0; cut < n; cut++) {
            RadErr e = {0};
            int rc = load_buf(b, cut, &e);
            cr_assert_neq(rc, RAD_OK, "truncated at %zu accepted", cut);
            cr_assert(strstr(e.msg, "bad.rad") != NULL, "message lacks the file name: %s", e.msg);
            cr_assert(strchr(e.msg, '\n') == NULL);
        }
        free(b);
    }
}

Test(container, rejects_unknown_version_by_name) {
    size_t n;
    uint8_t *b = sample_bytes(&n, 0);
    b[8] = 2; /* major 2 */
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "version 2.0") != NULL, "%s", e.msg);
    free(b);
}

Test(container, rejects_unknown_encoding_by_name) {
    size_t n;
    uint8_t *b = sample_bytes(&n, 0);
    uint8_t *p = find(b, n, "q8_0", 4);
    cr_assert_not_null(p);
    memcpy(p, "q9_9", 4);
    fix_header_checksum(b);
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "unknown encoding 'q9_9'") && strstr(e.msg, "tok_embd"), "%s", e.msg);
    free(b);
}

Test(container, header_corruption_is_caught_by_its_checksum) {
    size_t n;
    uint8_t *b = sample_bytes(&n, 0);
    b[64 + 40] ^= 0x10;
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_E_CHECKSUM);
    cr_assert(strstr(e.msg, "header checksum") != NULL, "%s", e.msg);
    free(b);
}

Test(container, data_corruption_is_caught_by_check_naming_the_tensor) {
    for (int z = 0; z < 2; z++) {
        size_t n;
        uint8_t *b = sample_bytes(&n, 3 * z);
        RadIn in;
        rad_in_init_mem(&in, b, n, "bad.rad");
        RadModelFile m;
        RadErr e = {0};
        cr_assert_eq(rad_container_load(&in, &m, &e), RAD_OK, "%s", e.msg);
        const RadTensor *t = rad_model_find(&m, "tok_embd");
        ((uint8_t *)t->planes[0].data)[5] ^= 1; /* the buffer is ours: flip a stored byte */
        int rc = rad_container_check(&m, NULL, NULL, &e);
        cr_assert_neq(rc, RAD_OK);
        cr_assert(strstr(e.msg, "tok_embd") != NULL, "%s", e.msg);
        rad_model_free(&m);
        free(b);
    }
}

/* Patches the first u64 equal to `from` after a marker string in the header. */
static void patch_u64_after(uint8_t *b, size_t n, const char *marker, uint64_t from, uint64_t to) {
    uint8_t *p = find(b, n, marker, strlen(marker));
    cr_assert_not_null(p);
    for (uint8_t *q = p; q + 8 <= b + n; q++) {
        uint64_t x = 0;
        for (int i = 7; i >= 0; i--) x = x << 8 | q[i];
        if (x == from) {
            for (int i = 0; i < 8; i++) q[i] = (uint8_t)(to >> (8 * i));
            fix_header_checksum(b);
            return;
        }
    }
    cr_assert_fail("value not found after %s", marker);
}

Test(container, rejects_offsets_past_end_overlap_and_overflowing_shapes) {
    size_t n;
    RadErr e = {0};
    uint8_t *b = sample_bytes(&n, 0);
    /* tok_embd shape [4, 32] -> [2^62, 32]: byte count overflows */
    patch_u64_after(b, n, "q8_0", 4, (uint64_t)1 << 62);
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "overflows") && strstr(e.msg, "tok_embd"), "%s", e.msg);
    free(b);

    b = sample_bytes(&n, 0);
    /* blk.0.w's plane: 6*64*4 = 1536 bytes at offset 0; move tok_embd (offset 1536) onto it */
    patch_u64_after(b, n, "q8_0", 1536, 8);
    rad_err_clear(&e);
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "overlap") != NULL, "%s", e.msg);
    free(b);

    b = sample_bytes(&n, 0);
    patch_u64_after(b, n, "q8_0", 1536, (uint64_t)1 << 40);
    rad_err_clear(&e);
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "past the data area") != NULL, "%s", e.msg);
    free(b);

    b = sample_bytes(&n, 0);
    /* header length beyond the file */
    b[16 + 5] = 0x7f;
    rad_err_clear(&e);
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "header length") != NULL, "%s", e.msg);
    free(b);
}

Test(container, rejects_non_utf8_tensor_names) {
    size_t n;
    uint8_t *b = sample_bytes(&n, 0);
    uint8_t *p = find(b, n, "blk.0.w", 7);
    p[3] = 0xff;
    fix_header_checksum(b);
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "UTF-8") != NULL, "%s", e.msg);
    free(b);
}

Test(container, a_failed_write_leaves_nothing) {
    char p[300];
    path_in(p, sizeof p, "out.rad");
    RadErr e = {0};
    RadWriter *w;
    cr_assert_eq(rad_writer_init(&w, p, NULL, 0, &e), RAD_OK, "%s", e.msg);
    uint64_t shape[1] = {10};
    float d[10] = {0};
    RadPlaneSrc ps = {"data", d, 36}; /* wrong size: refused */
    cr_assert_eq(rad_writer_add_tensor(w, "x", RAD_ENC_F32, 1, shape, 1, &ps, &e), RAD_E_SHAPE);
    cr_assert(strstr(e.msg, "'x'") != NULL, "%s", e.msg);
    rad_writer_free(w); /* abandoned: the temporary goes */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", tmpdir);
    cr_assert_eq(system(cmd), 0, "files left behind in %s", tmpdir);
    /* an existing output is refused without overwrite, and left as it was */
    FILE *f = fopen(p, "w");
    fputs("keep", f);
    fclose(f);
    rad_err_clear(&e);
    cr_assert_eq(rad_writer_init(&w, p, NULL, 0, &e), RAD_E_IO);
    cr_assert(strstr(e.msg, "exists") != NULL, "%s", e.msg);
    size_t n;
    uint8_t *b = slurp(p, &n);
    cr_assert(n == 4 && memcmp(b, "keep", 4) == 0);
    free(b);
}

Test(container, model_write_round_trips_a_loaded_container) {
    char p[300], q[300];
    path_in(p, sizeof p, "a.rad");
    path_in(q, sizeof q, "b.rad");
    RadErr e = {0};
    cr_assert_eq(write_sample(p, 3, 64, &e), RAD_OK, "%s", e.msg);
    RadModelFile m;
    cr_assert_eq(rad_model_open(p, &m, &e), RAD_OK, "%s", e.msg);
    RadWriteOpts o = {.alignment = 128};
    cr_assert_eq(rad_model_write(&m, q, &o, 0, &e), RAD_OK, "%s", e.msg);
    rad_model_free(&m);
    cr_assert_eq(rad_model_open(q, &m, &e), RAD_OK, "%s", e.msg);
    check_sample(&m, 1);
    rad_model_free(&m);
}

/* ---- hand-built tables: the rules FORMAT.md states, each refused naming the file and field --- */

typedef struct Buf {
    uint8_t *p;
    size_t n, cap;
} Buf;

static void put(Buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void le(Buf *b, uint64_t x, int n) {
    uint8_t c[8];
    for (int i = 0; i < n; i++) c[i] = (uint8_t)(x >> (8 * i));
    put(b, c, (size_t)n);
}
static void bstr(Buf *b, const char *s, size_t n) { le(b, n, 8), put(b, s, n); }

/* One entry: a u8 tensor of `bytes` elements, one plane named pname at offset. */
static void entry(Buf *b, const char *name, size_t name_len, const char *pname, uint64_t offset, uint64_t bytes,
                  uint32_t reserved) {
    bstr(b, name, name_len);
    bstr(b, "u8", 2);
    le(b, 1, 4), le(b, bytes, 8); /* rank 1, shape */
    le(b, 1, 4);                  /* one plane */
    bstr(b, pname, strlen(pname));
    static const uint8_t zeros[64];
    cr_assert_leq(bytes, sizeof zeros);
    le(b, offset, 8), le(b, bytes, 8), le(b, bytes, 8), le(b, 0, 4), le(b, reserved, 4), le(b, XXH3_64bits(zeros, bytes), 8);
}

/* prefix, an empty META, TENS (count, then the table bytes), zero data; `extra` bytes after. */
static uint8_t *raw_rad(uint64_t count, const Buf *table, uint64_t data_bytes, size_t extra, uint32_t flags, size_t *n) {
    Buf h = {0}, f = {0};
    put(&h, "META", 4), le(&h, 0, 4), le(&h, 8, 8), le(&h, 0, 8);
    put(&h, "TENS", 4), le(&h, 0, 4), le(&h, 8 + table->n, 8), le(&h, count, 8);
    put(&h, table->p ? table->p : (const uint8_t *)"", table->n);
    uint64_t data_offset = (64 + h.n + 7) & ~(uint64_t)7;
    put(&f, RAD_MAGIC, 8), le(&f, 1, 4), le(&f, 0, 4), le(&f, h.n, 8), le(&f, data_offset, 8), le(&f, data_bytes, 8);
    le(&f, 8, 4), le(&f, flags, 4), le(&f, XXH3_64bits(h.p, h.n), 8), le(&f, 0, 8);
    put(&f, h.p, h.n);
    static const uint8_t z[4096];
    for (uint64_t left = data_offset - f.n + data_bytes + extra; left;) {
        size_t k = left < sizeof z ? (size_t)left : sizeof z;
        put(&f, z, k);
        left -= k;
    }
    free(h.p);
    *n = f.n;
    return f.p;
}

static void refused(uint64_t count, const Buf *t, uint64_t data_bytes, size_t extra, uint32_t flags, const char *want) {
    size_t n;
    uint8_t *b = raw_rad(count, t, data_bytes, extra, flags, &n);
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_E_FORMAT, "accepted (want '%s'): %s", want, e.msg);
    cr_assert(strstr(e.msg, "bad.rad: ") == e.msg, "the file is not named first: %s", e.msg);
    cr_assert(strstr(e.msg, want) != NULL, "want '%s', got: %s", want, e.msg);
    cr_assert_null(strchr(e.msg, '\n'));
    free(b);
}

Test(container, hand_built_tables_load_when_they_keep_the_rules) {
    Buf t = {0};
    entry(&t, "a", 1, "data", 0, 8, 0);
    entry(&t, "b", 1, "data", 8, 8, 0);
    size_t n;
    uint8_t *b = raw_rad(2, &t, 16, 0, 0, &n);
    RadErr e = {0};
    cr_assert_eq(load_buf(b, n, &e), RAD_OK, "the builder itself is wrong: %s", e.msg);
    free(b), free(t.p);
}

Test(container, rejects_empty_control_and_nul_names) {
    Buf t = {0};
    entry(&t, "", 0, "data", 0, 8, 0);
    refused(1, &t, 8, 0, 0, "tensor table entry 0: tensor name is empty");
    t.n = 0;
    entry(&t, "ok", 2, "data", 0, 8, 0);
    entry(&t, "a\x01" "b", 3, "data", 8, 8, 0);
    refused(2, &t, 16, 0, 0, "tensor table entry 1: tensor name holds control byte 0x01 at byte 1");
    t.n = 0;
    entry(&t, "a\nb", 3, "data", 0, 8, 0);
    refused(1, &t, 8, 0, 0, "control byte 0x0a at byte 1");
    t.n = 0;
    entry(&t, "a\0b", 3, "data", 0, 8, 0);
    refused(1, &t, 8, 0, 0, "tensor name holds a NUL byte");
    t.n = 0;
    entry(&t, "x", 1, "", 0, 8, 0);
    refused(1, &t, 8, 0, 0, "tensor 'x': a plane name is empty");
    t.n = 0;
    entry(&t, "x", 1, "da\x7f" "a", 0, 8, 0);
    refused(1, &t, 8, 0, 0, "tensor 'x': a plane name holds control byte 0x7f");
    free(t.p);
}

Test(container, rejects_leftover_table_bytes_and_counts_the_table_cannot_hold) {
    Buf t = {0};
    entry(&t, "a", 1, "data", 0, 8, 0);
    le(&t, 0, 8);
    refused(1, &t, 8, 0, 0, "tensor table: 8 bytes left over after 1 tensors");
    t.n = 0;
    entry(&t, "a", 1, "data", 0, 8, 0);
    refused(1000000, &t, 8, 0, 0, "tensor count 1000000 exceeds what the tensor table's");
    free(t.p);
}

Test(container, rejects_duplicate_names_reserved_fields_flags_and_trailing_bytes) {
    Buf t = {0};
    entry(&t, "a", 1, "data", 0, 8, 0);
    entry(&t, "b", 1, "data", 8, 8, 0);
    entry(&t, "a", 1, "data", 16, 8, 0);
    refused(3, &t, 24, 0, 0, "tensor 'a' appears twice");
    t.n = 0;
    entry(&t, "a", 1, "data", 0, 8, 5);
    refused(1, &t, 8, 0, 0, "tensor 'a' plane 'data': reserved field is 5, not 0");
    t.n = 0;
    entry(&t, "a", 1, "data", 0, 8, 0);
    refused(1, &t, 8, 0, 1, "prefix flags is 1, not 0");
    refused(1, &t, 8, 16, 0, "16 bytes after the data area");
    t.n = 0;
    entry(&t, "a", 1, "data", 0, 16, 0);
    entry(&t, "b", 1, "data", 8, 8, 0);
    refused(2, &t, 16, 0, 0, "tensor 'a' plane 'data' and tensor 'b' plane 'data' overlap");
    free(t.p);
}

/* Duplicate checks are linear (a hash set): 200,000 tensors write, open and --check at once; the
 * scans they replaced took minutes (the timeout is the bound, no wall time is asserted). */
Test(container, two_hundred_thousand_tensors_write_open_and_check) {
    test_deadline(30);
    enum { N = 200000 };
    char p[300];
    path_in(p, sizeof p, "many.rad");
    RadErr e = {0};
    RadWriter *w;
    cr_assert_eq(rad_writer_init(&w, p, NULL, 1, &e), RAD_OK, "%s", e.msg);
    static uint8_t d[8];
    uint64_t shape[1] = {8};
    RadPlaneSrc ps = {"data", d, 8};
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "blk.%d.w", i);
        cr_assert_eq(rad_writer_add_tensor(w, name, RAD_ENC_U8, 1, shape, 1, &ps, &e), RAD_OK, "%s", e.msg);
    }
    cr_assert_eq(rad_writer_add_tensor(w, "blk.7.w", RAD_ENC_U8, 1, shape, 1, &ps, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "'blk.7.w' added twice"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_writer_finish(w, &e), RAD_OK, "%s", e.msg);
    rad_writer_free(w);
    RadModelFile m;
    cr_assert_eq(rad_model_open(p, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, N);
    cr_assert_eq(rad_container_check(&m, NULL, NULL, &e), RAD_OK, "%s", e.msg);
    rad_model_free(&m);
}
