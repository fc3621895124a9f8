/* Sources: folders and archives (.tar, .tar.gz, .tar.zst, .zip) written here with libarchive,
 * loaded through rad_model_load_src and compared with the folder they were made from; hostile
 * member names; size limits; what a source without a model says. */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/io/rad_src.h"
#include "libcommon/format/rad_model.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/hf/tiny-llama"
#define GGUF_FIX "tests/fixtures/gguf/tiny.gguf"

static const char *FIX_FILES[] = {"config.json",
                                  "generation_config.json",
                                  "model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors",
                                  "model.safetensors.index.json",
                                  "tokenizer.json",
                                  "tokenizer_config.json"};
#define N_FIX (sizeof FIX_FILES / sizeof FIX_FILES[0])

static char tmpdir[64];

static void mk_tmp(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rad-src-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void rm_tmp(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* ---- writing archives ------------------------------------------------------------------------ */

enum Kind { TAR, TGZ, TZST, ZIP };

typedef struct Member {
    const char *name;  /* as stored */
    const void *data;
    size_t n;
    bool dir;          /* a directory entry */
} Member;

static void write_archive(const char *path, enum Kind k, const Member *mem, size_t n) {
    struct archive *a = archive_write_new();
    if (k == ZIP) {
        cr_assert_eq(archive_write_set_format_zip(a), ARCHIVE_OK);
    } else {
        cr_assert_eq(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        if (k == TGZ) cr_assert_eq(archive_write_add_filter_gzip(a), ARCHIVE_OK);
        if (k == TZST) cr_assert_eq(archive_write_add_filter_zstd(a), ARCHIVE_OK);
    }
    cr_assert_eq(archive_write_open_filename(a, path), ARCHIVE_OK, "%s", archive_error_string(a));
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, mem[i].name);
        archive_entry_set_filetype(e, mem[i].dir ? AE_IFDIR : AE_IFREG);
        archive_entry_set_perm(e, mem[i].dir ? 0755 : 0644);
        archive_entry_set_size(e, mem[i].dir ? 0 : (la_int64_t)mem[i].n);
        cr_assert_eq(archive_write_header(a, e), ARCHIVE_OK, "%s", archive_error_string(a));
        if (!mem[i].dir && mem[i].n)
            cr_assert_eq(archive_write_data(a, mem[i].data, mem[i].n), (la_ssize_t)mem[i].n);
        archive_entry_free(e);
    }
    cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* The fixture folder as an archive, under root (e.g. "tiny-llama/") or at the top (""). */
static void archive_fixture(const char *path, enum Kind k, const char *root) {
    Member mem[N_FIX + 1];
    uint8_t *bufs[N_FIX];
    char names[N_FIX][128];
    size_t n = 0;
    if (root[0]) mem[n++] = (Member){root, NULL, 0, true};
    for (size_t i = 0; i < N_FIX; i++) {
        char p[256];
        snprintf(p, sizeof p, FIX "/%s", FIX_FILES[i]);
        size_t len;
        bufs[i] = slurp(p, &len);
        snprintf(names[i], sizeof names[i], "%s%s", root, FIX_FILES[i]);
        mem[n++] = (Member){names[i], bufs[i], len, false};
    }
    write_archive(path, k, mem, n);
    for (size_t i = 0; i < N_FIX; i++) free(bufs[i]);
}

static int open_and_load(const char *path, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    RadSrc s;
    int rc = rad_src_open(&s, path, e);
    if (rc) return rc;
    rc = rad_model_load_src(&s, m, e);
    rad_src_free(&s);
    return rc;
}

/* Same tensors (names, shapes, bytes) and same tables as the reference. */
static void same_model(const RadModelFile *a, const RadModelFile *b) {
    cr_assert_str_eq(a->format, b->format);
    cr_assert_eq(a->n_tensors, b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const RadTensor *x = &a->tensors[i];
        const RadTensor *y = rad_model_find(b, x->name);
        cr_assert_not_null(y, "%s", x->name);
        cr_assert_eq(x->enc, y->enc);
        cr_assert_eq(x->rank, y->rank);
        cr_assert_eq(memcmp(x->shape, y->shape, sizeof x->shape), 0);
        cr_assert_eq(x->planes[0].nbytes, y->planes[0].nbytes);
        cr_assert_not_null(x->planes[0].data);
        cr_assert_eq(memcmp(x->planes[0].data, y->planes[0].data, x->planes[0].nbytes), 0, "%s", x->name);
    }
    cr_assert_eq(a->meta.n, b->meta.n);
    cr_assert_eq(a->tok.n, b->tok.n);
    cr_assert_eq(a->chat.n, b->chat.n);
    cr_assert_eq(a->raw.n, b->raw.n);
    for (uint64_t i = 0; i < a->meta.n; i++) cr_assert_not_null(rad_dict_get(&b->meta, a->meta.keys[i].p));
}

/* ---- folders ------------------------------------------------------------------------------------ */

Test(src, folder_listing_and_reading, .init = mk_tmp, .fini = rm_tmp) {
    char p[256];
    snprintf(p, sizeof p, "%s/sub", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.hidden", tmpdir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.hidden/x.gguf", tmpdir);
    write_file(p, "x", 1);
    snprintf(p, sizeof p, "%s/sub/b.txt", tmpdir);
    write_file(p, "bee", 3);
    snprintf(p, sizeof p, "%s/a.txt", tmpdir);
    write_file(p, "a", 1);
    snprintf(p, sizeof p, "%s/link.txt", tmpdir);
    cr_assert_eq(symlink("a.txt", p), 0);
    RadSrc s;
    RadErr e = {0};
    snprintf(p, sizeof p, "%s//", tmpdir);
    cr_assert_eq(rad_src_open(&s, p, &e), RAD_OK, "%s", e.msg);
    cr_assert_not(s.is_archive);
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.entries[0].name, "a.txt");
    cr_assert_str_eq(s.entries[1].name, "link.txt");
    cr_assert_str_eq(s.entries[2].name, "sub/b.txt");
    cr_assert_eq(s.entries[2].size, 3);
    cr_assert_str_eq(s.stem, tmpdir + 5);
    cr_assert_str_eq(s.path, tmpdir);
    cr_assert(rad_src_has(&s, "sub/b.txt"));
    cr_assert(rad_src_has(&s, "./sub//b.txt"));
    cr_assert_not(rad_src_has(&s, "sub"));
    cr_assert_not(rad_src_has(&s, ".hidden/x.gguf"));
    RadIn in;
    cr_assert_eq(rad_src_read(&s, "sub/b.txt", &in, 100, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(in.size, 3);
    cr_assert_eq(memcmp(in.data, "bee", 3), 0);
    cr_assert(strstr(in.name, "/sub/b.txt"));
    rad_in_close(&in);
    cr_assert_eq(rad_src_read(&s, "sub/b.txt", &in, 2, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "b.txt: 3 bytes exceeds the limit of 2"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_src_read(&s, "nope.txt", &in, 100, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "no file 'nope.txt'"), "%s", e.msg);
    rad_err_clear(&e);
    cr_assert_eq(rad_src_read(&s, "../a.txt", &in, 100, &e), RAD_E_ARG);
    rad_err_clear(&e);
    cr_assert_eq(rad_src_read(&s, "/etc/passwd", &in, 100, &e), RAD_E_ARG);
    uint64_t first = 9;
    cr_assert_eq(rad_src_count_suffix(&s, ".TXT", &first), 3);
    cr_assert_eq(first, 0);
    char list[64];
    rad_src_describe(&s, list, sizeof list, 2);
    cr_assert_str_eq(list, "a.txt, link.txt (and 1 more)");
    rad_src_free(&s);
    rad_src_free(&s); /* freeing twice is harmless */

    /* nothing loadable: the message lists what is there */
    RadModelFile m;
    cr_assert_eq(open_and_load(tmpdir, &m, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "no config.json, .gguf or .safetensors file (holds: a.txt, link.txt, "
                            "sub/b.txt)"), "%s", e.msg);
    rad_model_free(&m);
}

Test(src, bad_paths) {
    RadSrc s;
    RadErr e = {0};
    cr_assert_eq(rad_src_open(&s, "/nonexistent/radiance", &e), RAD_E_IO);
    cr_assert(strstr(e.msg, "/nonexistent/radiance: No such file"), "%s", e.msg);
    rad_src_free(&s);
    rad_err_clear(&e);
    cr_assert_eq(rad_src_open(&s, FIX "/config.json", &e), RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "config.json: not a folder or a supported archive"), "%s", e.msg);
    rad_src_free(&s);
    rad_err_clear(&e);
    cr_assert_eq(rad_src_open(&s, "/dev/null", &e), RAD_E_UNSUPPORTED);
    cr_assert_not(rad_src_looks_like_archive(FIX "/config.json"));
    cr_assert_not(rad_src_looks_like_archive(FIX));
    cr_assert_not(rad_src_looks_like_archive("/nonexistent"));
}

Test(src, empty_file_is_not_an_archive, .init = mk_tmp, .fini = rm_tmp) {
    char p[256];
    snprintf(p, sizeof p, "%s/empty", tmpdir);
    write_file(p, "", 0);
    RadSrc s;
    RadErr e = {0};
    cr_assert_eq(rad_src_open(&s, p, &e), RAD_E_UNSUPPORTED, "%s", e.msg);
    cr_assert_not(rad_src_looks_like_archive(p));
}

Test(src, index_and_shards_without_config, .init = mk_tmp, .fini = rm_tmp) {
    for (size_t i = 2; i < 5; i++) {
        char from[256], to[256];
        snprintf(from, sizeof from, FIX "/%s", FIX_FILES[i]);
        snprintf(to, sizeof to, "%s/%s", tmpdir, FIX_FILES[i]);
        size_t n;
        uint8_t *b = slurp(from, &n);
        write_file(to, b, n);
        free(b);
    }
    RadModelFile m;
    RadErr e;
    cr_assert_eq(open_and_load(tmpdir, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.format, "safetensors");
    cr_assert_eq(m.n_tensors, 21);
    cr_assert_eq(m.n_ins, 2);
    rad_model_free(&m);
    /* two loose safetensors and no index: ambiguous */
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", tmpdir);
    unlink(p);
    cr_assert_eq(open_and_load(tmpdir, &m, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "holds 2 .safetensors files but no config.json"), "%s", e.msg);
    rad_model_free(&m);
}

/* ---- archives ----------------------------------------------------------------------------------- */

static void archive_round_trip(enum Kind k, const char *ext, const char *root) {
    char path[256];
    snprintf(path, sizeof path, "%s/model%s", tmpdir, ext);
    archive_fixture(path, k, root);
    RadErr e = {0};
    cr_assert(rad_src_looks_like_archive(path));
    RadSrc s;
    cr_assert_eq(rad_src_open(&s, path, &e), RAD_OK, "%s", e.msg);
    cr_assert(s.is_archive);
    cr_assert_eq(s.n, N_FIX);
    cr_assert_str_eq(s.stem, root[0] ? "tiny-llama" : "model");
    for (size_t i = 0; i < N_FIX; i++) cr_assert(rad_src_has(&s, FIX_FILES[i]), "%s", FIX_FILES[i]);
    /* the JSON files were kept from the listing pass; the weights were not */
    cr_assert_not_null(rad_src_find(&s, "tokenizer.json")->cache);
    cr_assert_null(rad_src_find(&s, "model-00001-of-00002.safetensors")->cache);
    /* reads in any order, repeatedly */
    RadIn in;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = N_FIX; i-- > 0;) {
            cr_assert_eq(rad_src_read(&s, FIX_FILES[i], &in, RAD_SRC_NO_LIMIT, &e), RAD_OK, "%s", e.msg);
            char fp[256];
            snprintf(fp, sizeof fp, FIX "/%s", FIX_FILES[i]);
            size_t n;
            uint8_t *want = slurp(fp, &n);
            cr_assert_eq(in.size, n, "%s", FIX_FILES[i]);
            cr_assert_eq(memcmp(in.data, want, n), 0);
            char nm[300];
            snprintf(nm, sizeof nm, "%s:%s%s", path, root, FIX_FILES[i]);
            cr_assert_str_eq(in.name, nm);
            free(want);
            rad_in_close(&in);
        }
    cr_assert_eq(rad_src_read(&s, "config.json", &in, 10, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, ":config.json") || strstr(e.msg, "/config.json"), "%s", e.msg);
    rad_err_clear(&e);
    RadModelFile m = {0}, ref;
    cr_assert_eq(rad_model_load_src(&s, &m, &e), RAD_OK, "%s", e.msg);
    rad_src_free(&s);
    cr_assert_eq(open_and_load(FIX, &ref, &e), RAD_OK, "%s", e.msg);
    same_model(&m, &ref);
    cr_assert_str_eq(m.path, path);
    cr_assert(strstr(m.ins[0].name, ":") && strstr(m.ins[0].name, "model-00001-of-00002.safetensors"),
              "%s", m.ins[0].name);
    /* weights are inflated into an unlinked temporary file and mapped, not held in memory */
    for (int i = 0; i < m.n_ins; i++)
        cr_assert(m.ins[i].kind == RAD_IN_MMAP && !m.ins[i].owned, "%s: kind %d", m.ins[i].name, m.ins[i].kind);
    const char *name;
    cr_assert_eq(rad_dict_gets(&m.meta, "model.name", &name, &e), RAD_OK);
    cr_assert_str_eq(name, "radiance/tiny-llama");
    rad_model_free(&m);
    /* and through rad_model_open, which detects the archive by content */
    cr_assert_eq(rad_model_open(path, &m, &e), RAD_OK, "%s", e.msg);
    same_model(&m, &ref);
    rad_model_free(&m);
    rad_model_free(&ref);
}

Test(src, tar, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(TAR, ".tar", "tiny-llama/"); }
Test(src, tar_gz, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(TGZ, ".tar.gz", "tiny-llama/"); }
Test(src, tar_zst, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(TZST, ".tar.zst", "tiny-llama/"); }
Test(src, zip, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(ZIP, ".zip", "tiny-llama/"); }
Test(src, tgz_without_a_root_folder, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(TGZ, ".tgz", ""); }
Test(src, zip_without_a_root_folder, .init = mk_tmp, .fini = rm_tmp) { archive_round_trip(ZIP, ".zip", ""); }

Test(src, gguf_inside_a_tar, .init = mk_tmp, .fini = rm_tmp) {
    if (access(GGUF_FIX, R_OK) != 0) cr_skip_test("no small GGUF fixture at " GGUF_FIX);
    size_t n;
    uint8_t *b = slurp(GGUF_FIX, &n);
    Member mem[] = {{"pack/README.md", "hi", 2, false}, {"pack/tiny.gguf", b, n, false}};
    char path[256];
    snprintf(path, sizeof path, "%s/g.tar.zst", tmpdir);
    write_archive(path, TZST, mem, 2);
    free(b);
    RadModelFile m, ref;
    RadErr e;
    cr_assert_eq(open_and_load(path, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.format, "gguf");
    cr_assert(strstr(m.path, "g.tar.zst:pack/tiny.gguf") || strstr(m.ins[0].name, "g.tar.zst:pack/tiny.gguf"),
              "%s / %s", m.path, m.ins[0].name);
    memset(&ref, 0, sizeof ref);
    cr_assert_eq(rad_model_open(GGUF_FIX, &ref, &e), RAD_OK, "%s", e.msg);
    same_model(&m, &ref);
    rad_model_free(&m);
    rad_model_free(&ref);
}

Test(src, single_safetensors_in_an_archive, .init = mk_tmp, .fini = rm_tmp) {
    size_t n;
    uint8_t *b = slurp(FIX "/model-00002-of-00002.safetensors", &n);
    Member mem[] = {{"w/weights.safetensors", b, n, false}, {"w/notes.txt", "x", 1, false}};
    char path[256];
    snprintf(path, sizeof path, "%s/w.tar", tmpdir);
    write_archive(path, TAR, mem, 2);
    free(b);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(open_and_load(path, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(m.format, "safetensors");
    cr_assert_eq(m.n_tensors, 11);
    rad_model_free(&m);
}

Test(src, two_ggufs_or_nothing, .init = mk_tmp, .fini = rm_tmp) {
    Member mem[] = {{"a.gguf", "GGUF", 4, false}, {"b.gguf", "GGUF", 4, false}};
    char path[256];
    snprintf(path, sizeof path, "%s/two.tar", tmpdir);
    write_archive(path, TAR, mem, 2);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(open_and_load(path, &m, &e), RAD_E_ARG);
    cr_assert(strstr(e.msg, "holds 2 .gguf files, pick one (holds: a.gguf, b.gguf)"), "%s", e.msg);
    rad_model_free(&m);
    snprintf(path, sizeof path, "%s/none.zip", tmpdir);
    write_archive(path, ZIP, mem, 0);
    cr_assert_eq(open_and_load(path, &m, &e), RAD_E_NOTFOUND);
    cr_assert(strstr(e.msg, "(holds: nothing)"), "%s", e.msg);
    rad_model_free(&m);
}

Test(src, hostile_member_names, .init = mk_tmp, .fini = rm_tmp) {
    static const struct {
        const char *name, *needle;
    } bad[] = {
        {"../evil.json", "member '../evil.json': path escapes the archive"},
        {"dir/../../evil.json", "path escapes the archive"},
        {"ok/..", "path escapes the archive"},
        {"/etc/passwd", "member '/etc/passwd': absolute path"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int k = TAR; k <= ZIP; k += ZIP - TAR) {
            Member mem[] = {{"config.json", "{}", 2, false}, {bad[i].name, "x", 1, false}};
            char path[256];
            snprintf(path, sizeof path, "%s/evil%zu%s", tmpdir, i, k == ZIP ? ".zip" : ".tar");
            write_archive(path, (enum Kind)k, mem, 2);
            RadSrc s;
            RadErr e = {0};
            int rc = rad_src_open(&s, path, &e);
            cr_assert_eq(rc, RAD_E_FORMAT, "%s: rc %d (%s)", bad[i].name, rc, e.msg);
            cr_assert(strstr(e.msg, bad[i].needle), "'%s' lacks '%s'", e.msg, bad[i].needle);
            cr_assert(strstr(e.msg, path), "%s", e.msg);
            rad_src_free(&s);
        }
    /* "./" prefixes and doubled slashes are harmless */
    Member ok[] = {{"./x//config.json", "{}", 2, false}, {"./x/./y.txt", "y", 1, false}};
    char path[256];
    snprintf(path, sizeof path, "%s/dots.tar", tmpdir);
    write_archive(path, TAR, ok, 2);
    RadSrc s;
    RadErr e = {0};
    cr_assert_eq(rad_src_open(&s, path, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(s.stem, "x");
    cr_assert(rad_src_has(&s, "config.json"));
    cr_assert(rad_src_has(&s, "y.txt"));
    RadIn in;
    cr_assert_eq(rad_src_read(&s, "y.txt", &in, 10, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(in.size, 1);
    rad_in_close(&in);
    rad_src_free(&s);
    /* the same name twice */
    Member dup[] = {{"a/config.json", "{}", 2, false}, {"a/./config.json", "{}", 2, false}};
    snprintf(path, sizeof path, "%s/dup.tar", tmpdir);
    write_archive(path, TAR, dup, 2);
    cr_assert_eq(rad_src_open(&s, path, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "member 'a/./config.json' appears twice"), "%s", e.msg);
}

Test(src, damaged_archives, .init = mk_tmp, .fini = rm_tmp) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.tar.gz", tmpdir);
    archive_fixture(path, TGZ, "tiny-llama/");
    size_t n;
    uint8_t *b = slurp(path, &n);
    /* cut at many points: a clean error (or, early on, "not an archive"), never a crash */
    for (size_t cut = 0; cut < n; cut += n / 23 + 1) {
        char p2[256];
        snprintf(p2, sizeof p2, "%s/cut.tar.gz", tmpdir);
        write_file(p2, b, cut);
        RadModelFile m;
        RadErr e;
        int rc = open_and_load(p2, &m, &e);
        cr_assert(rc == RAD_E_FORMAT || rc == RAD_E_UNSUPPORTED || rc == RAD_E_NOTFOUND,
                  "cut %zu: rc %d (%s)", cut, rc, e.msg);
        cr_assert(strstr(e.msg, "cut.tar.gz"), "cut %zu: %s", cut, e.msg);
        rad_model_free(&m);
    }
    /* a flipped byte inside the compressed stream */
    b[n / 2] ^= 0x55;
    write_file(path, b, n);
    RadModelFile m;
    RadErr e;
    int rc = open_and_load(path, &m, &e);
    cr_assert(rc == RAD_E_FORMAT, "rc %d (%s)", rc, e.msg);
    rad_model_free(&m);
    free(b);
}

Test(src, member_size_lies, .init = mk_tmp, .fini = rm_tmp) {
    /* a ustar header claiming 64 GiB for a 4-byte member: refused cleanly, nothing allocated */
    Member mem[] = {{"x/model.gguf", "GGUF", 4, false}};
    char path[256];
    snprintf(path, sizeof path, "%s/lie.tar", tmpdir);
    write_archive(path, TAR, mem, 1);
    size_t n;
    uint8_t *b = slurp(path, &n);
    cr_assert(n >= 512 && memcmp(b + 257, "ustar", 5) == 0);
    memcpy(b + 124, "00777777777", 11); /* size, octal */
    memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += b[i];
    snprintf((char *)b + 148, 8, "%06o", sum);
    b[155] = ' ';
    write_file(path, b, n);
    free(b);
    RadModelFile m;
    RadErr e;
    int rc = open_and_load(path, &m, &e);
    /* refused from the header alone: no archive this small can inflate to that */
    cr_assert_eq(rc, RAD_E_LIMIT, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "lie.tar:x/model.gguf: declares"), "%s", e.msg);
    rad_model_free(&m);
}

/* ---- bombs and inputs that never end (issue 11, classes 4 and 5) ------------------------------ */

/* A member declaring far more than the archive could inflate to is refused from its header,
 * before a byte is inflated: a zip holding 48 MiB of zeros (~50 KB on disk), and a tar.zst. */
Test(src, bomb_declared, .init = mk_tmp, .fini = rm_tmp) {
    size_t big = 48u << 20;
    uint8_t *zeros = calloc(big, 1);
    const char *cfg = "{\"model_type\":\"llama\"}";
    Member mem[] = {{"config.json", cfg, strlen(cfg), false}, {"model.safetensors", zeros, big, false}};
    static const struct { enum Kind k; const char *name; } kinds[] = {{ZIP, "bomb.zip"}, {TZST, "bomb.tar.zst"}};
    for (size_t i = 0; i < 2; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", tmpdir, kinds[i].name);
        write_archive(path, kinds[i].k, mem, 2);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_lt((uint64_t)st.st_size, (uint64_t)big / 200, "%s is %lld bytes", path, (long long)st.st_size);
        RadModelFile m;
        RadErr e;
        int rc = open_and_load(path, &m, &e);
        cr_assert_eq(rc, RAD_E_LIMIT, "%s: rc %d (%s)", path, rc, e.msg);
        char want[300];
        snprintf(want, sizeof want, "%s:model.safetensors: declares %zu bytes", kinds[i].name, big);
        cr_assert(strstr(e.msg, want), "'%s' lacks '%s'", e.msg, want);
        cr_assert_null(strchr(e.msg, '\n'));
        rad_model_free(&m);
    }
    free(zeros);
}

/* Many members each inside the free allowance still make the compressed stream a bomb: the
 * whole stream's expansion is bounded too. */
Test(src, bomb_of_many_members, .init = mk_tmp, .fini = rm_tmp) {
    enum { N = 24 };
    size_t each = 1u << 20;
    uint8_t *zeros = calloc(each, 1);
    Member mem[N];
    char names[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "x/part%02d.bin", i);
        mem[i] = (Member){names[i], zeros, each, false};
    }
    char path[256];
    snprintf(path, sizeof path, "%s/many.tar.zst", tmpdir);
    write_archive(path, TZST, mem, N);
    RadSrc s;
    RadErr e = {0};
    int rc = rad_src_open(&s, path, &e);
    cr_assert_eq(rc, RAD_E_LIMIT, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "many.tar.zst: inflates to more than 200 times its size"), "%s", e.msg);
    rad_src_free(&s);
    free(zeros);
}

/* A FIFO given as the archive, or as a member of a folder, is refused at once by name. */
Test(src, fifos_are_refused, .init = mk_tmp, .fini = rm_tmp) {
    test_deadline(30);
    char path[256];
    snprintf(path, sizeof path, "%s/x.tar", tmpdir);
    cr_assert_eq(mkfifo(path, 0644), 0);
    RadSrc s;
    RadErr e = {0};
    cr_assert_neq(rad_src_open(&s, path, &e), RAD_OK);
    cr_assert(strstr(e.msg, "x.tar"), "%s", e.msg);
    cr_assert(!rad_src_looks_like_archive(path));
    rad_src_free(&s);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/d", tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    cr_assert_eq(mkfifo(path, 0644), 0);
    RadModelFile m;
    int rc = open_and_load(dir, &m, &e);
    cr_assert_eq(rc, RAD_E_IO, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "d/m.gguf: not a regular file"), "%s", e.msg);
    rad_model_free(&m);
}

/* A weights member is copied into $TMPDIR to be mapped: where it cannot be, the refusal names
 * the member and the folder (and memory was never the fallback). */
Test(src, temporary_copy_refused_by_name, .init = mk_tmp, .fini = rm_tmp) {
    char path[256];
    snprintf(path, sizeof path, "%s/fx.tar.zst", tmpdir);
    archive_fixture(path, TZST, "tiny-llama/");
    char nodir[200];
    snprintf(nodir, sizeof nodir, "%s/no-such-dir", tmpdir);
    cr_assert_eq(setenv("TMPDIR", nodir, 1), 0);
    RadModelFile m;
    RadErr e;
    int rc = open_and_load(path, &m, &e);
    cr_assert_eq(rc, RAD_E_IO, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "fx.tar.zst:tiny-llama/model-0000") && strstr(e.msg, "cannot make a temporary copy in ") &&
              strstr(e.msg, "no-such-dir"), "%s", e.msg);
    rad_model_free(&m);
}
