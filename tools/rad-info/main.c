/* rad-info — what a .rad container, GGUF file, safetensors file or Hugging Face folder (or an
 * archive of one) holds: header, model metadata, tokenizer, chat format, tensors. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcommon/format/rad_container.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/plugin/rad_plugins.h"
#include "libcommon/base/rad_stdout.h"

typedef struct Opts {
    int json, tensors, check, raw, verbose, plugins;
    const char *plugin_dirs[16];
    int n_plugin_dirs;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rad-info [options] FILE|-\n"
            "       rad-info --plugins [--plugin-dir DIR] [--json]\n"
            "  FILE is a .rad container, a GGUF or safetensors file, a Hugging Face folder,\n"
            "  or a .tar/.tar.gz/.tar.zst/.zip holding one; - reads a .rad/GGUF/safetensors stream from stdin\n"
            "  --tensors   list every tensor (name, encoding, shape, bytes, offset)\n"
            "  --raw       also show the source's own metadata, verbatim\n"
            "  --json      one JSON object on stdout (stable keys, for jq)\n"
            "  --check     verify every checksum of a .rad container; exit 1 on a mismatch\n"
            "  -v          with --check, one line per plane\n"
            "  --plugins   list the installed plugins: name, kind, id, quant, version, ABI, path\n"
            "  --plugin-dir DIR  look for plugins in DIR first (repeatable)\n"
            "  -h, --help  this text\n");
}

/* ---- text ------------------------------------------------------------------------------ */

static void human_bytes(char *out, size_t n, uint64_t b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int i = 0;
    while (x >= 1024 && i < 4) x /= 1024, i++;
    if (i == 0) snprintf(out, n, "%" PRIu64 " B", b);
    else snprintf(out, n, "%.2f %s", x, u[i]);
}

static void shape_str(char *out, size_t n, const RadTensor *t) {
    size_t k = 0;
    k += (size_t)snprintf(out + k, n - k, "[");
    for (uint32_t d = 0; d < t->rank && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static uint64_t tensor_bytes(const RadTensor *t, int stored) {
    uint64_t b = 0;
    for (uint32_t j = 0; j < t->n_planes; j++) b += stored ? t->planes[j].stored_bytes : t->planes[j].nbytes;
    return b;
}

static void print_kv(const RadDict *kv, const char *indent, int max_elems) {
    for (uint64_t i = 0; i < kv->n; i++) {
        printf("%s%-40s ", indent, kv->keys[i].p);
        rad_value_print(stdout, &kv->vals[i], max_elems);
        putchar('\n');
    }
}

static const char *tok_text(const RadDict *tok, const char *idkey) {
    int64_t id;
    const RadValue *toks = rad_dict_get(tok, "tokenizer.tokens");
    if (rad_dict_geti(tok, idkey, &id, NULL) != RAD_OK || !toks || toks->type != RAD_VAL_ARRAY ||
        toks->arr_type != RAD_VAL_STRING || id < 0 || (uint64_t)id >= toks->n)
        return NULL;
    return ((const RadStr *)toks->v.arr)[id].p;
}

static uint64_t arr_len(const RadDict *kv, const char *key) {
    const RadValue *v = rad_dict_get(kv, key);
    return v && v->type == RAD_VAL_ARRAY ? v->n : 0;
}

typedef struct EncTotal {
    uint64_t count, bytes, stored;
} EncTotal;

static void totals(const RadModelFile *m, EncTotal *by, EncTotal *all) {
    memset(by, 0, sizeof(EncTotal) * RAD_ENC_COUNT);
    memset(all, 0, sizeof *all);
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadTensor *t = &m->tensors[i];
        EncTotal *b = &by[t->enc];
        b->count++, all->count++;
        b->bytes += tensor_bytes(t, 0), all->bytes += tensor_bytes(t, 0);
        b->stored += tensor_bytes(t, 1), all->stored += tensor_bytes(t, 1);
    }
}

/* Keys already shown as RadModelMeta fields. */
static int is_model_key(const char *k) {
    static const char *shown[] = {"model.arch_id", "model.name", "model.quant", "model.n_layers",
        "model.n_embd", "model.n_head", "model.n_head_kv", "model.head_dim", "model.n_ff",
        "model.n_vocab", "model.n_ctx_train", "model.n_expert", "model.n_expert_used",
        "model.rms_eps", "model.rope_theta"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        if (strcmp(k, shown[i]) == 0) return 1;
    return 0;
}

static void print_text(const RadModelFile *m, const Opts *o) {
    char hb[32];
    printf("file        %s\n", m->path);
    printf("format      %s", m->format);
    if (m->version) printf(" v%u", m->version);
    if (m->alignment > 1) printf(", alignment %u", m->alignment);
    if (m->n_ins == 1) printf(", data at byte %" PRIu64, m->data_offset);
    else if (m->n_ins > 1) printf(", %d files", m->n_ins);
    if (strcmp(m->format, "rad") == 0) printf("\nid          %016" PRIx64 " (the header's XXH3-64: what a tuning table is keyed by)", m->id);
    printf("\n\nmodel\n");
    RadModelMeta mm;
    RadErr e = {0};
    if (rad_model_meta(m, &mm, &e) == RAD_OK) {
        printf("  arch_id       %s\n  name          %s\n  quant         %s\n", mm.arch_id, mm.name,
               mm.quant[0] ? mm.quant : "(none)");
        printf("  n_layers      %d\n  n_embd        %d\n  n_head        %d\n  n_head_kv     %d\n"
               "  head_dim      %d\n  n_ff          %d\n  n_vocab       %d\n  n_ctx_train   %d\n",
               mm.n_layers, mm.n_embd, mm.n_head, mm.n_head_kv, mm.head_dim, mm.n_ff, mm.n_vocab,
               mm.n_ctx_train);
        if (mm.n_expert) printf("  n_expert      %d (%d used)\n", mm.n_expert, mm.n_expert_used);
        printf("  rms_eps       %g\n  rope_theta    %g\n", (double)mm.rms_eps, (double)mm.rope_theta);
    } else {
        printf("  (no model metadata: %s)\n", e.msg);
    }
    int any = 0;
    for (uint64_t i = 0; i < m->meta.n; i++) {
        if (is_model_key(m->meta.keys[i].p)) continue;
        if (!any++) printf("\nmetadata\n");
        printf("  %-40s ", m->meta.keys[i].p);
        rad_value_print(stdout, &m->meta.vals[i], 8);
        putchar('\n');
    }
    printf("\ntokenizer\n");
    if (m->tok.n == 0) {
        printf("  (none)\n");
    } else {
        const char *model = "?", *pre = "?";
        rad_dict_gets(&m->tok, "tokenizer.model", &model, NULL);
        rad_dict_gets(&m->tok, "tokenizer.pre", &pre, NULL);
        printf("  model         %s\n  pre           %s\n  tokens        %" PRIu64 "\n  merges        %" PRIu64 "\n",
               model, pre, arr_len(&m->tok, "tokenizer.tokens"), arr_len(&m->tok, "tokenizer.merges"));
        if (arr_len(&m->tok, "tokenizer.scores")) printf("  scores        %" PRIu64 "\n", arr_len(&m->tok, "tokenizer.scores"));
        static const char *ids[] = {"bos", "eos", "eot", "unk", "pad", "sep", "mask"};
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
            char key[64];
            int64_t id;
            snprintf(key, sizeof key, "tokenizer.%s_id", ids[i]);
            if (rad_dict_geti(&m->tok, key, &id, NULL) != RAD_OK) continue;
            const char *txt = tok_text(&m->tok, key);
            printf("  %-4s          %" PRId64 " %s\n", ids[i], id, txt ? txt : "(out of range)");
        }
        for (uint64_t i = 0; i < m->tok.n; i++) {
            const char *k = m->tok.keys[i].p;
            const RadValue *v = &m->tok.vals[i];
            if (v->type == RAD_VAL_BOOL) printf("  %-13s %s\n", k + 10, v->v.u ? "true" : "false");
        }
    }
    printf("\nchat format\n");
    const char *kind = NULL, *tmpl = NULL;
    rad_dict_gets(&m->chat, "chat.kind", &kind, NULL);
    rad_dict_gets(&m->chat, "chat.template", &tmpl, NULL);
    if (!kind && !tmpl) printf("  (none)\n");
    else printf("  kind          %s\n  template      %zu bytes\n", kind ? kind : "unknown", tmpl ? strlen(tmpl) : 0);
    if (o->raw && m->raw.n) {
        printf("\nraw metadata (%" PRIu64 " keys)\n", m->raw.n);
        print_kv(&m->raw, "  ", 8);
    }
    EncTotal by[RAD_ENC_COUNT], all;
    totals(m, by, &all);
    human_bytes(hb, sizeof hb, all.bytes);
    printf("\ntensors       %" PRIu64 ", %s (%" PRIu64 " bytes)", all.count, hb, all.bytes);
    if (all.stored != all.bytes) {
        human_bytes(hb, sizeof hb, all.stored);
        printf(", %s stored", hb);
    }
    printf("\n");
    for (int k = 0; k < RAD_ENC_COUNT; k++) {
        if (!by[k].count) continue;
        human_bytes(hb, sizeof hb, by[k].bytes);
        printf("  %-8s %6" PRIu64 " tensors %14" PRIu64 " bytes  %s\n", rad_enc_info((RadEnc)k)->name, by[k].count, by[k].bytes, hb);
    }
    if (!o->tensors) return;
    printf("\n  %-48s %-8s %-20s %12s %12s\n", "name", "encoding", "shape", "bytes", "offset");
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const RadTensor *t = &m->tensors[i];
        char sh[128];
        shape_str(sh, sizeof sh, t);
        printf("  %-48s %-8s %-20s %12" PRIu64 " %12" PRIu64, t->name, rad_enc_info(t->enc)->name, sh,
               tensor_bytes(t, 0), t->planes[0].offset);
        if (t->n_planes > 1 || strcmp(t->planes[0].name, "data") != 0) {
            printf("  planes:");
            for (uint32_t j = 0; j < t->n_planes; j++) printf(" %s", t->planes[j].name);
        }
        if (tensor_bytes(t, 1) != tensor_bytes(t, 0)) printf("  zstd %" PRIu64, tensor_bytes(t, 1));
        putchar('\n');
    }
}

/* ---- JSON ------------------------------------------------------------------------------ */

static json_t *jstr(const char *p, uint64_t n) {
    json_t *s = json_stringn_nocheck(p, n);
    if (s && !rad_utf8_valid(p, n)) { /* not UTF-8: hex, so the output stays valid JSON */
        json_decref(s);
        char *h = malloc(n * 2 + 5);
        if (!h) return json_null();
        strcpy(h, "hex:");
        for (uint64_t i = 0; i < n; i++) sprintf(h + 4 + 2 * i, "%02x", (unsigned char)p[i]);
        s = json_string(h);
        free(h);
    }
    return s;
}

static json_t *jscalar(RadValType t, const void *p) {
    switch (t) {
    case RAD_VAL_U8: return json_integer(*(const uint8_t *)p);
    case RAD_VAL_I8: return json_integer(*(const int8_t *)p);
    case RAD_VAL_U16: { uint16_t x; memcpy(&x, p, 2); return json_integer(x); }
    case RAD_VAL_I16: { int16_t x; memcpy(&x, p, 2); return json_integer(x); }
    case RAD_VAL_U32: { uint32_t x; memcpy(&x, p, 4); return json_integer(x); }
    case RAD_VAL_I32: { int32_t x; memcpy(&x, p, 4); return json_integer(x); }
    case RAD_VAL_U64: { uint64_t x; memcpy(&x, p, 8); return x > INT64_MAX ? json_real((double)x) : json_integer((json_int_t)x); }
    case RAD_VAL_I64: { int64_t x; memcpy(&x, p, 8); return json_integer(x); }
    case RAD_VAL_F32: { float x; memcpy(&x, p, 4); return json_real(x); }
    case RAD_VAL_F64: { double x; memcpy(&x, p, 8); return json_real(x); }
    case RAD_VAL_BOOL: return json_boolean(*(const uint8_t *)p);
    default: return json_null();
    }
}

/* Arrays longer than max_elems become {"type":..., "n":...} so a vocabulary does not flood. */
static json_t *jvalue(const RadValue *v, uint64_t max_elems) {
    switch (v->type) {
    case RAD_VAL_STRING: return jstr(v->v.s.p, v->v.s.len);
    case RAD_VAL_F32: case RAD_VAL_F64: return json_real(v->v.f);
    case RAD_VAL_BOOL: return json_boolean(v->v.u);
    case RAD_VAL_I8: case RAD_VAL_I16: case RAD_VAL_I32: case RAD_VAL_I64: return json_integer(v->v.i);
    case RAD_VAL_ARRAY: break;
    default: return v->v.u > INT64_MAX ? json_real((double)v->v.u) : json_integer((json_int_t)v->v.u);
    }
    if (v->n > max_elems) return json_pack("{s:s, s:s, s:I}", "type", "array", "elem", rad_val_type_name(v->arr_type), "n", (json_int_t)v->n);
    json_t *a = json_array();
    size_t es = rad_val_scalar_size(v->arr_type);
    for (uint64_t i = 0; i < v->n; i++) {
        json_t *x;
        if (es) x = jscalar(v->arr_type, (const uint8_t *)v->v.arr + i * es);
        else if (v->arr_type == RAD_VAL_STRING) x = jstr(((const RadStr *)v->v.arr)[i].p, ((const RadStr *)v->v.arr)[i].len);
        else x = jvalue(&((const RadValue *)v->v.arr)[i], max_elems);
        json_array_append_new(a, x);
    }
    return a;
}

static json_t *jkv(const RadDict *kv, uint64_t max_elems) {
    json_t *o = json_object();
    for (uint64_t i = 0; i < kv->n; i++) json_object_set_new(o, kv->keys[i].p, jvalue(&kv->vals[i], max_elems));
    return o;
}

static json_t *json_model(const RadModelFile *m, const Opts *o) {
    json_t *r = json_object();
    json_object_set_new(r, "file", json_string(m->path));
    json_object_set_new(r, "format", json_string(m->format));
    json_object_set_new(r, "version", json_integer(m->version));
    json_object_set_new(r, "alignment", json_integer(m->alignment));
    json_object_set_new(r, "data_offset", json_integer((json_int_t)m->data_offset));
    if (strcmp(m->format, "rad") == 0) {
        char id[17];
        snprintf(id, sizeof id, "%016" PRIx64, m->id);
        json_object_set_new(r, "id", json_string(id));
    }
    RadModelMeta mm;
    if (rad_model_meta(m, &mm, NULL) == RAD_OK) {
        json_object_set_new(r, "model", json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f}",
            "arch_id", mm.arch_id, "name", mm.name, "quant", mm.quant, "n_layers", mm.n_layers,
            "n_embd", mm.n_embd, "n_head", mm.n_head, "n_head_kv", mm.n_head_kv, "head_dim", mm.head_dim,
            "n_ff", mm.n_ff, "n_vocab", mm.n_vocab, "n_ctx_train", mm.n_ctx_train, "n_expert", mm.n_expert,
            "n_expert_used", mm.n_expert_used, "rms_eps", (double)mm.rms_eps, "rope_theta", (double)mm.rope_theta));
    } else {
        json_object_set_new(r, "model", json_null());
    }
    json_object_set_new(r, "metadata", jkv(&m->meta, 64));
    json_t *tok = jkv(&m->tok, 0);
    json_object_set_new(tok, "n_tokens", json_integer((json_int_t)arr_len(&m->tok, "tokenizer.tokens")));
    json_object_set_new(tok, "n_merges", json_integer((json_int_t)arr_len(&m->tok, "tokenizer.merges")));
    json_object_set_new(r, "tokenizer", tok);
    json_object_set_new(r, "chat", jkv(&m->chat, 64));
    if (o->raw) json_object_set_new(r, "raw", jkv(&m->raw, 64));
    EncTotal by[RAD_ENC_COUNT], all;
    totals(m, by, &all);
    json_t *be = json_object();
    for (int k = 0; k < RAD_ENC_COUNT; k++)
        if (by[k].count)
            json_object_set_new(be, rad_enc_info((RadEnc)k)->name,
                                json_pack("{s:I, s:I, s:I}", "tensors", (json_int_t)by[k].count, "bytes",
                                          (json_int_t)by[k].bytes, "stored_bytes", (json_int_t)by[k].stored));
    json_object_set_new(r, "totals", json_pack("{s:I, s:I, s:I, s:o}", "tensors", (json_int_t)all.count, "bytes",
                                               (json_int_t)all.bytes, "stored_bytes", (json_int_t)all.stored,
                                               "by_encoding", be));
    if (o->tensors) {
        json_t *ts = json_array();
        for (uint64_t i = 0; i < m->n_tensors; i++) {
            const RadTensor *t = &m->tensors[i];
            json_t *shape = json_array(), *planes = json_array();
            for (uint32_t d = 0; d < t->rank; d++) json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
            for (uint32_t j = 0; j < t->n_planes; j++) {
                const RadPlane *p = &t->planes[j];
                char ck[17];
                snprintf(ck, sizeof ck, "%016" PRIx64, p->checksum);
                json_array_append_new(planes, json_pack("{s:s, s:I, s:I, s:I, s:s, s:s}", "name", p->name,
                    "offset", (json_int_t)p->offset, "bytes", (json_int_t)p->nbytes, "stored_bytes",
                    (json_int_t)p->stored_bytes, "compression", p->compression ? "zstd" : "none", "checksum", ck));
            }
            json_array_append_new(ts, json_pack("{s:s, s:s, s:o, s:I, s:o}", "name", t->name, "encoding",
                rad_enc_info(t->enc)->name, "shape", shape, "bytes", (json_int_t)tensor_bytes(t, 0), "planes", planes));
        }
        json_object_set_new(r, "tensors", ts);
    }
    return r;
}

/* ---- plugins ---------------------------------------------------------------------------- */

static int list_plugins(const Opts *o) {
    char **dirs = NULL;
    int n_dirs = rad_plugin_dirs(o->plugin_dirs, o->n_plugin_dirs, &dirs);
    RadPluginSet s = {0};
    RadErr e = {0};
    int rc = rad_plugins_load(&s, dirs, n_dirs, &e);
    if (rc) {
        fprintf(stderr, "rad-info: %s\n", e.msg);
    } else if (o->json) {
        json_t *a = json_array(), *d = json_array();
        for (int i = 0; i < n_dirs; i++) json_array_append_new(d, json_string(dirs[i]));
        for (int i = 0; i < s.n; i++) {
            const RadPlugin *p = &s.p[i];
            json_t *x = json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", p->info->name, "kind",
                                  p->info->kind == RAD_PLUGIN_ARCH ? "arch" : "kernels", "version", p->info->version ? p->info->version : "",
                                  "description", p->info->description ? p->info->description : "", "path", p->path);
            char abi[32];
            snprintf(abi, sizeof abi, "%u.%u", p->info->abi_major, p->info->abi_minor);
            json_object_set_new(x, "abi", json_string(abi));
            if (p->info->kind == RAD_PLUGIN_ARCH) {
                json_object_set_new(x, "arch_id", json_string(p->arch_id));
                json_object_set_new(x, "quant", json_string(p->quant));
                json_object_set_new(x, "serves_imports", json_boolean(p->serves_imports));
            } else {
                json_object_set_new(x, "kernels", json_integer(p->lib->n_kernels));
            }
            json_array_append_new(a, x);
        }
        json_t *k = json_array(); /* the files left out, and why (a warning each on stderr too) */
        for (int i = 0; i < s.n_skipped; i++) {
            json_t *x = json_pack("{s:s, s:s, s:s}", "path", s.skipped[i].path, "name", s.skipped[i].name, "why", s.skipped[i].why);
            if (x) json_array_append_new(k, x);
        }
        json_t *r = json_pack("{s:o, s:o, s:o}", "search_path", d, "plugins", a, "skipped", k);
        json_dumpf(r, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
        json_decref(r);
    } else {
        printf("search path:");
        for (int i = 0; i < n_dirs; i++) printf(" %s", dirs[i]);
        printf("\n\n%-16s %-8s %-10s %-12s %-9s %-5s %s\n", "name", "kind", "id", "quant", "version", "abi", "path");
        for (int i = 0; i < s.n; i++) {
            const RadPlugin *p = &s.p[i];
            char quant[64];
            snprintf(quant, sizeof quant, "\"%s\"%s", p->quant ? p->quant : "", p->serves_imports ? "+imp" : "");
            printf("%-16s %-8s %-10s %-12s %-9s %u.%-3u %s\n", p->info->name,
                   p->info->kind == RAD_PLUGIN_ARCH ? "arch" : "kernels", p->arch_id ? p->arch_id : "-",
                   p->info->kind == RAD_PLUGIN_ARCH ? quant : "-", p->info->version ? p->info->version : "?",
                   p->info->abi_major, p->info->abi_minor, p->path);
        }
        if (!s.n) printf("(no plugins found)\n");
        if (s.n_skipped) printf("\nskipped (RADIANCE_PLUGINS_STRICT=1 makes each an error):\n");
        for (int i = 0; i < s.n_skipped; i++) printf("  %s: %s\n", s.skipped[i].path, s.skipped[i].why);
    }
    rad_plugins_free(&s);
    rad_plugin_dirs_free(dirs, n_dirs);
    return rc ? 1 : 0;
}

/* ---- main ------------------------------------------------------------------------------ */

typedef struct CheckCtx {
    int verbose;
    uint64_t ok, bad;
} CheckCtx;

static void on_check(void *user, const RadTensor *t, const RadPlane *p, int ok) {
    CheckCtx *c = user;
    ok ? c->ok++ : c->bad++;
    if (!ok) fprintf(stderr, "rad-info: tensor '%s' plane '%s': checksum MISMATCH\n", t->name, p->name);
    else if (c->verbose) fprintf(stderr, "ok  %s/%s\n", t->name, p->name);
}

int main(int argc, char **argv) {
    rad_stdout_init(); /* first: --help too; a closed pipe is EPIPE, not a death by SIGPIPE */
    Opts o = {0};
    static const struct option lo[] = {
        {"json", no_argument, 0, 'j'}, {"tensors", no_argument, 0, 't'}, {"check", no_argument, 0, 'c'},
        {"raw", no_argument, 0, 'r'},  {"help", no_argument, 0, 'h'},    {"plugins", no_argument, 0, 'P'},
        {"plugin-dir", required_argument, 0, 'D'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hv", lo, NULL)) != -1) {
        switch (c) {
        case 'j': o.json = 1; break;
        case 't': o.tensors = 1; break;
        case 'c': o.check = 1; break;
        case 'r': o.raw = 1; break;
        case 'v': o.verbose = 1; break;
        case 'P': o.plugins = 1; break;
        case 'D':
            if (o.n_plugin_dirs == 16) return fprintf(stderr, "rad-info: too many --plugin-dir\n"), 2;
            o.plugin_dirs[o.n_plugin_dirs++] = optarg;
            break;
        case 'h': usage(stdout); return rad_stdout_close("rad-info", 0);
        default:
            fprintf(stderr, "rad-info: unknown option '%s' (see rad-info --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (o.plugins && optind == argc) return rad_stdout_close("rad-info", list_plugins(&o));
    if (optind != argc - 1) {
        fprintf(stderr, "rad-info: expected exactly one FILE (or -); see rad-info --help\n");
        return 2;
    }
    RadModelFile m;
    RadErr e = {0};
    if (rad_model_open(argv[optind], &m, &e) != RAD_OK) {
        fprintf(stderr, "rad-info: %s\n", e.msg[0] ? e.msg : "cannot open input");
        rad_model_free(&m);
        return 1;
    }
    rad_model_guard_inputs(&m, "truncated while read (SIGBUS)"); /* one line and exit 3, not a crash */
    if (o.json) {
        json_t *j = json_model(&m, &o);
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        putchar('\n');
        json_decref(j);
    } else {
        print_text(&m, &o);
    }
    int rc = 0;
    if (rad_stdout_flush(&e)) { /* a full disk or closed pipe: the one line, before --check's */
        fprintf(stderr, "rad-info: %s\n", e.msg);
        rc = 1;
    }
    if (!rc && o.check) {
        CheckCtx cc = {o.verbose, 0, 0};
        if (rad_container_check(&m, on_check, &cc, &e) != RAD_OK) {
            fprintf(stderr, "rad-info: %s\n", e.msg);
            rc = 1;
        } else {
            fprintf(stderr, "rad-info: %" PRIu64 " planes, all checksums match\n", cc.ok);
        }
    }
    rad_model_free(&m);
    return rad_stdout_close("rad-info", rc);
}
