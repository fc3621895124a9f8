/* rad-convert SRC -o OUT — a checkpoint (Hugging Face folder, GGUF file, safetensors, or an
 * archive of one) into one .rad container, driven by the architecture plugin's name map: this
 * tool knows nothing of any model. */
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/format/rad_hf.h"
#include "libcommon/format/rad_container.h"
#include "libcommon/base/rad_num.h"
#include "libcommon/plugin/rad_plugins.h"
#include "libcommon/io/rad_src.h"
#include "libcommon/format/rad_model.h"
#include "libcommon/base/rad_stdout.h"
#include "plan.h"

typedef struct Opts {
    const char *src, *out;
    int plan_only, verbose, force, zstd, vocab_only, drop_unclaimed, no_tokenizer;
    RadStepBounds bounds;         /* --max-mixed-tok/--max-seqs/--ctx: what the plan declares against */
    uint32_t align;
    QuantChoice quant;
    const char *sets[64];
    int n_sets;
    const char *plugin_dirs[16];
    int n_plugin_dirs;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: rad-convert SRC -o OUT [options]\n"
            "  SRC   a Hugging Face folder, a GGUF or safetensors file, or a .tar/.tar.gz/.tar.zst/.zip of one\n"
            "  OUT   the .rad container to write; - writes to stdout\n"
            "  --quant Q          target encoding of the weights the plugin takes in any encoding:\n"
            "                     keep (default), f32, bf16, f16, q8_0\n"
            "  --set KEY=VALUE    set a metadata key in the output (model.name=..., model.quant=...)\n"
            "  --plan-only        plan without writing; exit 0 exactly when a convert would succeed\n"
            "  -v                 with --plan-only (or alone): print every tensor of the plan\n"
            "  --max-mixed-tok N, --max-seqs N, --ctx N\n"
            "                     the step bounds the plan declares against, as radiance takes them\n"
            "                     (default: radiance's, 512 / 16 / n_ctx_train capped at 8192)\n"
            "  --force            replace OUT if it exists\n"
            "  --zstd N           compress each tensor with zstd level N (1..19)\n"
            "  --align N          data alignment (power of two, default 64)\n"
            "  --plugin-dir DIR   look for plugins in DIR first (repeatable)\n"
            "  --vocab-only       write only the tokenizer and chat format (SRC may hold no weights:\n"
            "                     a GGUF with no tensors, or a folder with only tokenizer files)\n"
            "  --drop-unclaimed   leave out checkpoint tensors the plugin's name map does not read\n"
            "                     (refused by default: they mean the metadata and tensors disagree)\n"
            "  --no-tokenizer     convert a SRC that holds no tokenizer (refused by default)\n");
}

static int parse_quant(const char *s, QuantChoice *q) {
    static const char *names[] = {"keep", "f32", "bf16", "f16", "q8_0"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) return *q = (QuantChoice)i, 1;
    return 0;
}

/* --set KEY=VALUE as given: a key of 1..255 bytes of printable UTF-8, given once, at most 64. */
static int check_set(const Opts *o, const char *arg, RadErr *e) {
    const char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : 0;
    if (!klen) return rad_err_set(e, RAD_E_ARG, "--set %.64s: expected KEY=VALUE", arg);
    if (klen > 255) return rad_err_set(e, RAD_E_ARG, "--set %.40s...: the key is longer than 255 bytes", arg);
    for (size_t i = 0; i < klen; i++)
        if ((unsigned char)arg[i] < 0x20 || arg[i] == 0x7f)
            return rad_err_set(e, RAD_E_ARG, "--set: key '%.*s' holds a control character", (int)klen, arg);
    if (!rad_utf8_valid(arg, klen)) return rad_err_set(e, RAD_E_ARG, "--set: key '%.*s' is not UTF-8", (int)klen, arg);
    for (int i = 0; i < o->n_sets; i++)
        if (!strncmp(o->sets[i], arg, klen) && o->sets[i][klen] == '=')
            return rad_err_set(e, RAD_E_ARG, "--set %.*s: given twice", (int)klen, arg);
    if (o->n_sets == 64) return rad_err_set(e, RAD_E_ARG, "--set %.*s: more than 64 --set", (int)klen, arg);
    return RAD_OK;
}

/* The type a --set value takes: the key's type in the output metadata when it is there, else
 * the documented type of a model.* or generation.* key (docs/KEYS.md), else a string. */
static RadValType set_type(const RadDict *meta, const char *key) {
    const RadValue *v = rad_dict_get(meta, key);
    if (v) return v->type;
    static const struct { const char *key; RadValType t; } known[] = {
        {"model.n_layers", RAD_VAL_U32}, {"model.n_embd", RAD_VAL_U32}, {"model.n_head", RAD_VAL_U32},
        {"model.n_head_kv", RAD_VAL_U32}, {"model.head_dim", RAD_VAL_U32}, {"model.n_ff", RAD_VAL_U32},
        {"model.n_vocab", RAD_VAL_U32}, {"model.n_ctx_train", RAD_VAL_U32}, {"model.n_expert", RAD_VAL_U32},
        {"model.n_expert_used", RAD_VAL_U32}, {"model.rms_eps", RAD_VAL_F32}, {"model.rope_theta", RAD_VAL_F32},
        {"model.tie_embeddings", RAD_VAL_BOOL}, {"rope.scaling.factor", RAD_VAL_F32},
        {"rope.scaling.low_freq_factor", RAD_VAL_F32}, {"rope.scaling.high_freq_factor", RAD_VAL_F32},
        {"rope.scaling.original_context_length", RAD_VAL_U32},
        /* generation_config.json's sampling defaults, typed as an HF folder's import gives them */
        {"generation.temperature", RAD_VAL_F64}, {"generation.top_p", RAD_VAL_F64}, {"generation.min_p", RAD_VAL_F64},
        {"generation.repetition_penalty", RAD_VAL_F64}, {"generation.top_k", RAD_VAL_I64},
        {"generation.do_sample", RAD_VAL_BOOL}, {"generation.max_new_tokens", RAD_VAL_I64},
        /* an embedding model's pipeline (docs/KEYS.md, "Encoders and embedding models") */
        {"pooling.normalize", RAD_VAL_BOOL}, {"pooling.max_tokens", RAD_VAL_U32}, {"pooling.dims", RAD_VAL_ARRAY},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(key, known[i].key)) return known[i].t;
    return RAD_VAL_STRING;
}

/* Applies every --set to meta, each value parsed strictly as its key's type (set_type): a
 * number must be finite and fit the type, named by its key. */
static int apply_sets(const Opts *o, RadDict *meta, RadErr *e) {
    for (int i = 0; i < o->n_sets; i++) {
        char key[256], what[272];
        const char *eq = strchr(o->sets[i], '='), *val = eq + 1;
        snprintf(key, sizeof key, "%.*s", (int)(eq - o->sets[i]), o->sets[i]);
        snprintf(what, sizeof what, "--set %s", key);
        RadValType t = set_type(meta, key);
        RadValue v = {.type = t};
        int rc = RAD_OK;
        double f = 0;
        if (t == RAD_VAL_ARRAY) { /* pooling.dims: sizes "512,256,128", each a u32 */
            uint32_t a[64];
            uint64_t n = 0, x;
            char item[32];
            for (const char *p = val; *p; n++) {
                size_t k = strcspn(p, ",");
                if (n == 64 || k == 0 || k >= sizeof item)
                    return rad_err_set(e, RAD_E_ARG, "--set %s: '%.40s' is not a list of at most 64 sizes like 512,256", key, val);
                memcpy(item, p, k), item[k] = 0;
                if ((rc = rad_num_u64(what, item, 1, UINT32_MAX, &x, e))) return rc;
                a[n] = (uint32_t)x;
                p += k + (p[k] == ',');
            }
            if (!n) return rad_err_set(e, RAD_E_ARG, "--set %s: an empty list", key);
            if ((rc = rad_dict_set_arr(meta, key, RAD_VAL_U32, a, n, e))) return rc;
            continue;
        }
        switch (t) {
        case RAD_VAL_STRING: rc = rad_dict_set_str(meta, key, val, e); continue;
        case RAD_VAL_BOOL:
            if (strcmp(val, "true") && strcmp(val, "false"))
                return rad_err_set(e, RAD_E_ARG, "--set %s: '%.40s' is not true or false (the key is a bool)", key, val);
            v.v.u = !strcmp(val, "true");
            break;
        case RAD_VAL_U8: rc = rad_num_u64(what, val, 0, UINT8_MAX, &v.v.u, e); break;
        case RAD_VAL_U16: rc = rad_num_u64(what, val, 0, UINT16_MAX, &v.v.u, e); break;
        case RAD_VAL_U32: rc = rad_num_u64(what, val, 0, UINT32_MAX, &v.v.u, e); break;
        case RAD_VAL_U64: rc = rad_num_u64(what, val, 0, UINT64_MAX, &v.v.u, e); break;
        case RAD_VAL_I8: rc = rad_num_f64(what, val, INT8_MIN, INT8_MAX, RAD_NUM_WHOLE, &f, e), v.v.i = (int64_t)f; break;
        case RAD_VAL_I16: rc = rad_num_f64(what, val, INT16_MIN, INT16_MAX, RAD_NUM_WHOLE, &f, e), v.v.i = (int64_t)f; break;
        case RAD_VAL_I32: rc = rad_num_f64(what, val, INT32_MIN, INT32_MAX, RAD_NUM_WHOLE, &f, e), v.v.i = (int64_t)f; break;
        case RAD_VAL_I64: /* exact as a double up to 2^53 */
            rc = rad_num_f64(what, val, -9007199254740992.0, 9007199254740992.0, RAD_NUM_WHOLE, &f, e), v.v.i = (int64_t)f;
            break;
        case RAD_VAL_F32: rc = rad_num_f64(what, val, -FLT_MAX, FLT_MAX, RAD_NUM_REAL, &v.v.f, e); break;
        case RAD_VAL_F64: rc = rad_num_f64(what, val, -DBL_MAX, DBL_MAX, RAD_NUM_REAL, &v.v.f, e); break;
        default: return rad_err_set(e, RAD_E_ARG, "--set %s: the key is an array; --set sets only scalars and strings", key);
        }
        if (rc || (rc = rad_dict_set(meta, key, &v, e))) return rc;
    }
    return RAD_OK;
}

static int parse_args(int argc, char **argv, Opts *o) {
    static const struct option lo[] = {
        {"quant", required_argument, 0, 'q'}, {"set", required_argument, 0, 's'},
        {"plan-only", no_argument, 0, 'p'},   {"force", no_argument, 0, 'f'},
        {"zstd", required_argument, 0, 'z'},  {"align", required_argument, 0, 'a'},
        {"plugin-dir", required_argument, 0, 'D'}, {"help", no_argument, 0, 'h'},
        {"output", required_argument, 0, 'o'}, {"vocab-only", no_argument, 0, 'V'},
        {"drop-unclaimed", no_argument, 0, 'U'}, {"no-tokenizer", no_argument, 0, 'T'},
        {"max-mixed-tok", required_argument, 0, 'M'}, {"max-seqs", required_argument, 0, 'S'},
        {"ctx", required_argument, 0, 'C'}, {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "o:vh", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'v': o->verbose = 1; break;
        case 'p': o->plan_only = 1; break;
        case 'V': o->vocab_only = 1; break;
        case 'U': o->drop_unclaimed = 1; break;
        case 'T': o->no_tokenizer = 1; break;
        case 'f': o->force = 1; break;
        case 'q':
            if (!parse_quant(optarg, &o->quant)) {
                fprintf(stderr, "rad-convert: --quant %s: not one of keep, f32, bf16, f16, q8_0\n", optarg);
                return 2;
            }
            break;
        case 's': {
            RadErr e = {0};
            if (check_set(o, optarg, &e)) return fprintf(stderr, "rad-convert: %s\n", e.msg), 2;
            o->sets[o->n_sets++] = optarg;
            break;
        }
        case 'z': {
            RadErr e = {0};
            uint64_t v;
            if (rad_num_u64("--zstd", optarg, 1, 19, &v, &e)) return fprintf(stderr, "rad-convert: %s\n", e.msg), 2;
            o->zstd = (int)v;
            break;
        }
        case 'a': {
            RadErr e = {0};
            uint64_t v;
            if (rad_num_u64("--align", optarg, 8, 1u << 20, &v, &e)) return fprintf(stderr, "rad-convert: %s\n", e.msg), 2;
            if (v & (v - 1)) return fprintf(stderr, "rad-convert: --align %s: not a power of two\n", optarg), 2;
            o->align = (uint32_t)v;
            break;
        }
        case 'M': case 'S': case 'C': { /* radiance's flags and ranges */
            RadErr e = {0};
            uint64_t v;
            const char *flag = c == 'M' ? "--max-mixed-tok" : c == 'S' ? "--max-seqs" : "--ctx";
            uint64_t lo = c == 'C' ? 16 : 1, hi = c == 'S' ? 4096 : 1u << 20;
            if (rad_num_u64(flag, optarg, lo, hi, &v, &e)) return fprintf(stderr, "rad-convert: %s\n", e.msg), 2;
            *(c == 'M' ? &o->bounds.max_tok : c == 'S' ? &o->bounds.max_seqs : &o->bounds.max_ctx) = (uint32_t)v;
            break;
        }
        case 'D':
            if (o->n_plugin_dirs == 16) return fprintf(stderr, "rad-convert: too many --plugin-dir\n"), 2;
            o->plugin_dirs[o->n_plugin_dirs++] = optarg;
            break;
        case 'h': usage(stdout); exit(rad_stdout_close("rad-convert", 0));
        default:
            fprintf(stderr, "rad-convert: unknown or incomplete option '%s' (see rad-convert --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "rad-convert: expected one SRC (see rad-convert --help)\n");
        return 2;
    }
    o->src = argv[optind];
    if (!o->out && !o->plan_only) {
        fprintf(stderr, "rad-convert: -o OUT is required (or --plan-only)\n");
        return 2;
    }
    return 0;
}

/* ---- the architecture id and the descriptor --------------------------------------------- */

/* A Hugging Face class name or model_type, to the plugin id that serves it. */
static const char *arch_alias(const char *s) {
    static const struct { const char *from, *to; } t[] = {
        {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "llama"}, {"mistral", "llama"},
        {"Qwen3ForCausalLM", "qwen3"}, {"Gemma3ForCausalLM", "gemma3"}, {"Gemma3TextModel", "gemma3"}, {"gemma3_text", "gemma3"},
        {"BertModel", "bert"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(s, t[i].from) == 0) return t[i].to;
    return s;
}

static const char *arch_of(const RadModelFile *m) {
    const RadValue *a = rad_dict_get(&m->raw, "config.architectures");
    if (a && a->type == RAD_VAL_ARRAY && a->arr_type == RAD_VAL_STRING && a->n > 0)
        return arch_alias(((const RadStr *)a->v.arr)[0].p);
    const char *id = NULL;
    rad_dict_gets(&m->meta, "model.arch_id", &id, NULL);
    return id ? arch_alias(id) : NULL;
}

static int has_blocks(const RadModelFile *m) {
    for (uint64_t i = 0; i < m->n_tensors; i++)
        if (rad_enc_info(m->tensors[i].enc)->block_elems > 1) return 1;
    return 0;
}

static int has_f8_blocks(const RadModelFile *m) {
    for (uint64_t i = 0; i < m->n_tensors; i++)
        if (rad_tensor_is_f8_blocks(&m->tensors[i])) return 1;
    return 0;
}

/* keep on a GGUF quantisation imports it (served by the family's importing plugin); q8_0
 * made here is the native "ggml" descriptor; float targets are unquantised. */
static void descriptor(const RadModelFile *m, QuantChoice q, const char **quant, const char **origin) {
    *origin = "native";
    if (q == Q_Q8_0) {
        *quant = "ggml";
    } else if (q == Q_KEEP && has_f8_blocks(m)) { /* an fp8 checkpoint: the fp8 plugins' own descriptor */
        *quant = "fp8_e4m3";
    } else if (q == Q_KEEP && has_blocks(m)) {
        *quant = "";
        rad_dict_gets(&m->meta, "model.quant", quant, NULL);
        if (!**quant) *quant = "ggml";
        *origin = strcmp(m->format, "gguf") == 0 ? "import:gguf" : "import:unknown";
    } else {
        *quant = "";
    }
}

/* ---- progress ---------------------------------------------------------------------------- */

static void progress(int on, int i, int n, const char *name) {
    if (!on) return;
    int w = 30, k = n ? (i * w) / n : w;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-40.40s", k, "##############################", w - k, "", i, n, name ? name : "");
    if (i == n) fputc('\n', stderr);
}

/* ---- the temporary output and signals ---------------------------------------------------- */

/* SIGTERM/SIGINT/SIGHUP/SIGQUIT remove the temporary beside OUT, then kill as the default
 * action would (the exit status still says which signal). Only async-signal-safe calls. */
static char tmp_path[4200];
static const int fatal_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

static void tmp_remove(void) {
    if (tmp_path[0]) unlink(tmp_path);
}

static void on_fatal_signal(int sig) {
    if (tmp_path[0]) unlink(tmp_path);
    raise(sig); /* SA_RESETHAND restored the default; delivered when this returns */
}

static void signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_RESETHAND;
    sigfillset(&sa.sa_mask); /* one handler at a time */
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++) {
        struct sigaction old;
        /* a signal ignored at start stays ignored (nohup, a background job's SIGINT) */
        if (sigaction(fatal_sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(fatal_sigs[i], &sa, NULL);
    }
}

static void signals_block(int block) {
    sigset_t s;
    sigemptyset(&s);
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++) sigaddset(&s, fatal_sigs[i]);
    pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &s, NULL);
}

/* The temporary is created and its path published with the signals blocked, so no signal
 * falls between mkstemp and the handler knowing the path. */
static int writer_open(RadWriter **w, const char *out, const RadWriteOpts *wo, int force, RadErr *e) {
    signals_block(1);
    int rc = rad_writer_init(w, out, wo, force, e);
    if (!rc) snprintf(tmp_path, sizeof tmp_path, "%s", rad_writer_tmp_path(*w));
    signals_block(0);
    return rc;
}

static void writer_close(RadWriter *w) {
    signals_block(1);
    rad_writer_free(w);
    tmp_path[0] = 0;
    signals_block(0);
}

/* ---- --vocab-only ------------------------------------------------------------------------- */

static int slurp_member(RadSrc *s, const char *rel, RadIn *in, RadErr *e) {
    if (!rad_src_has(s, rel)) return RAD_E_NOTFOUND;
    return rad_src_read(s, rel, in, (uint64_t)64 << 20, e);
}

/* The tokenizer (and chat format) of SRC: any input rad_model_open reads, or a folder or
 * archive holding only tokenizer.json (+ tokenizer_config.json). */
static int load_vocab(const char *path, RadModelFile *m, RadErr *e) {
    RadErr first = {0};
    if (rad_model_open(path, m, &first) == RAD_OK && m->tok.n) return RAD_OK;
    rad_model_free(m);
    RadSrc s;
    if (rad_src_open(&s, path, e) != RAD_OK) {
        rad_err_clear(e);
        return rad_err_set(e, first.code ? first.code : RAD_E_NOTFOUND, "%s", first.msg[0] ? first.msg : "no tokenizer found");
    }
    memset(m, 0, sizeof *m);
    snprintf(m->format, sizeof m->format, "hf");
    snprintf(m->path, sizeof m->path, "%s", path);
    RadIn tj = {0}, tc = {0};
    int rc = slurp_member(&s, "tokenizer.json", &tj, e);
    if (rc == RAD_E_NOTFOUND) rc = rad_err_set(e, RAD_E_NOTFOUND, "%s: holds no tokenizer (no tokenizer.json, and %s)", path, first.msg);
    int rc2 = rc ? rc : slurp_member(&s, "tokenizer_config.json", &tc, e);
    if (!rc && rc2 && rc2 != RAD_E_NOTFOUND) rc = rc2;
    if (!rc)
        rc = rad_hf_read_tokenizer(m, "tokenizer.json", (const char *)tj.data, tj.size, tc.data ? "tokenizer_config.json" : NULL,
                                   (const char *)tc.data, tc.data ? tc.size : 0, e);
    rad_in_close(&tj);
    rad_in_close(&tc);
    rad_src_free(&s);
    return rc;
}

static int vocab_only(const Opts *o) {
    RadModelFile m;
    RadErr e = {0};
    int rc = load_vocab(o->src, &m, &e);
    if (!rc && !m.tok.n) rc = rad_err_set(&e, RAD_E_NOTFOUND, "%s: holds no tokenizer", o->src);
    RadDict meta;
    rad_dict_init(&meta);
    for (uint64_t i = 0; !rc && i < m.meta.n; i++) rc = rad_dict_set(&meta, m.meta.keys[i].p, &m.meta.vals[i], &e);
    if (!rc) rc = rad_dict_set_bool(&meta, "model.vocab_only", true, &e);
    int usage = 0; /* a --set value that does not fit its key: exit 2 */
    if (!rc && (rc = apply_sets(o, &meta, &e))) usage = 1;
    if (!rc && (o->plan_only || o->verbose)) {
        const RadValue *t = rad_dict_get(&m.tok, "tokenizer.tokens");
        fprintf(o->out && !strcmp(o->out, "-") ? stderr : stdout, "plan: %s -> %s: tokenizer only (%" PRIu64 " tokens), no weights\n",
                o->src, o->out ? o->out : "(nothing)", t ? t->n : 0);
    }
    if (!rc && !o->plan_only) {
        RadWriter *w = NULL;
        RadWriteOpts wo = {.alignment = o->align, .zstd_level = o->zstd};
        rc = writer_open(&w, o->out, &wo, o->force, &e);
        if (!rc) rc = rad_writer_set_kv(w, 0, &meta, &e);
        if (!rc) rc = rad_writer_set_kv(w, 1, &m.tok, &e);
        if (!rc) rc = rad_writer_set_kv(w, 2, &m.chat, &e);
        if (!rc) rc = rad_writer_finish(w, &e);
        writer_close(w);
    }
    if (rc) fprintf(stderr, "rad-convert: %s\n", e.msg);
    rad_dict_free(&meta);
    rad_model_free(&m);
    return rad_stdout_close("rad-convert", rc ? 1 + usage : 0);
}

/* ---- main -------------------------------------------------------------------------------- */

static int fail(const char *msg) {
    fprintf(stderr, "rad-convert: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    rad_stdout_init(); /* first: --help too; a closed pipe is EPIPE, not a death by SIGPIPE */
    Opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    signals_install();
    RadErr e = {0};
    if (o.out && strcmp(o.out, "-") != 0 && !o.force && !o.plan_only) {
        struct stat st;
        if (stat(o.out, &st) == 0) {
            fprintf(stderr, "rad-convert: %s: exists (use --force to replace it)\n", o.out);
            return 1;
        }
    }
    if (o.vocab_only) return vocab_only(&o);
    RadModelFile src;
    if (rad_model_open(o.src, &src, &e) != RAD_OK) {
        rad_model_free(&src);
        return fail(e.msg);
    }
    /* a source truncated while it is read: one line, the temporary removed, exit 3 (not SIGBUS) */
    rad_model_guard_on_fault(tmp_remove);
    rad_model_guard_inputs(&src, "truncated while converting (SIGBUS reading it)");
    const RadValue *archs = rad_dict_get(&src.raw, "config.architectures");
    if (archs && !(archs->type == RAD_VAL_ARRAY && archs->arr_type == RAD_VAL_STRING && archs->n > 0)) {
        rad_model_free(&src); /* not a fallback to model_type: the file says something we cannot read */
        fprintf(stderr, "rad-convert: %s: config.json field 'architectures': expected a non-empty array of strings\n", o.src);
        return 1;
    }
    const char *id = arch_of(&src), *quant, *origin;
    if (!id) {
        rad_model_free(&src);
        fprintf(stderr, "rad-convert: %s: names no architecture (config.json architectures / general.architecture)\n", o.src);
        return 1;
    }
    descriptor(&src, o.quant, &quant, &origin);

    /* the output's metadata: the source's, with the id, descriptor and --set applied */
    RadDict meta;
    rad_dict_init(&meta);
    for (uint64_t i = 0; i < src.meta.n && !rc; i++) rc = rad_dict_set(&meta, src.meta.keys[i].p, &src.meta.vals[i], &e);
    if (!rc) rc = rad_dict_set_str(&meta, "model.arch_id", id, &e);
    if (!rc) rc = rad_dict_set_str(&meta, "model.quant", quant, &e);
    if (!rc) rc = rad_dict_set_str(&meta, "model.quant_origin", origin, &e);
    int usage = 0; /* a --set value that does not fit its key: exit 2 */
    if (!rc && (rc = apply_sets(&o, &meta, &e))) usage = 1;
    if (!rc) rad_dict_gets(&meta, "model.quant", &quant, NULL), rad_dict_gets(&meta, "model.quant_origin", &origin, NULL);

    char **dirs = NULL;
    int n_dirs = rad_plugin_dirs(o.plugin_dirs, o.n_plugin_dirs, &dirs);
    RadPluginSet plugins = {0};
    const RadPlugin *plugin = NULL;
    if (!rc) rc = rad_plugins_load(&plugins, dirs, n_dirs, &e);
    if (!rc) rc = rad_plugins_find_arch(&plugins, id, quant, origin, &plugin, &e);

    RadModelFile view; /* the output's metadata seen as a model, for RadModelMeta */
    memset(&view, 0, sizeof view);
    view.meta = meta;
    snprintf(view.path, sizeof view.path, "%s", o.src);
    RadModelMeta mm;
    char **kk = NULL, **kv = NULL;
    if (!rc) rc = rad_model_meta(&view, &mm, &e);
    if (!rc) rc = rad_meta_table_fill(&mm, &meta, &src.chat, &kk, &kv, &e);
    RadBuildCtx ctx = rad_build_ctx_for(&mm, &o.bounds); /* radiance's bounds (rad_graph.h) */
    Plan plan = {.src = &src, .quant = o.quant, .drop_unclaimed = o.drop_unclaimed, .no_tokenizer = o.no_tokenizer};
    RadGraph g;
    memset(&g, 0, sizeof g);
    int declared = 0;
    if (!rc) {
        /* the installed libraries, with no tolerance bound: the encoding check asks whether some
         * deployment could serve each weight, not what today's default would pick */
        const RadSelectOpts sel = {.libs = &plugins, .max_tolerance = HUGE_VAL};
        rc = rad_graph_declare(&g, plugin, &mm, &ctx, &sel, plan_lookup, &plan, &e);
        declared = 1;
        if (rc && plan.missing[0]) { /* the lookup knows which checkpoint names it tried */
            rad_err_clear(&e);
            rc = rad_err_set(&e, RAD_E_NOTFOUND, "%s: %s", o.src, plan.missing);
        }
    }
    if (!rc) rc = plan_check(&plan, &e); /* unclaimed tensors, no tokenizer (docs/CONVERT.md) */
    int have_kernels = 0;
    for (int i = 0; i < plugins.n; i++) have_kernels |= plugins.p[i].info->kind == RAD_PLUGIN_KERNELS;
    if (!rc && have_kernels) rc = rad_graph_check_encodings(&g, &e);

    if (!rc && (o.verbose || o.plan_only)) {
        FILE *f = o.out && strcmp(o.out, "-") == 0 ? stderr : stdout;
        uint64_t total = 0;
        fprintf(f, "plan: %s -> %s with plugin '%s' (%s, \"%s\"%s%s)\n", o.src, o.out ? o.out : "(nothing)",
                plugin->info->name, plugin->arch_id, plugin->quant, strcmp(origin, "native") ? ", " : "",
                strcmp(origin, "native") ? origin : "");
        fprintf(f, "plan: declared as radiance serves it: max_mixed_tok %u, max_seqs %u, context %u\n", ctx.max_tok,
                ctx.max_seqs, ctx.max_ctx);
        for (int i = 0; i < plan.n; i++) {
            const PlanItem *it = &plan.items[i];
            total += it->bytes;
            if (!o.verbose) continue;
            static const char *kind[] = {"copy", "concat", "wnorm", "rows", "transpose", "ema", "tap", "cols"};
            fprintf(f, "  %-44s <- %-50s %-9s %-5s -> %-5s %12" PRIu64 "\n", it->dst, it->src[0]->name,
                    !it->has_map ? "copy" : it->map.add != 0 ? "copy+add" : kind[it->map.kind], rad_enc_info(it->src_enc)->name,
                    rad_enc_info(it->enc)->name, it->bytes);
        }
        for (int i = 0; o.verbose && i < g.n_notes; i++) fprintf(f, "  note: %s\n", g.notes[i]);
        if (!have_kernels) fprintf(f, "  (no kernel library installed: weight encodings were not checked against kernels)\n");
        fprintf(f, "plan: %d tensors, %" PRIu64 " bytes\n", plan.n, total);
    }

    if (!rc && !o.plan_only) {
        RadWriter *w = NULL;
        RadWriteOpts wo = {.alignment = o.align, .zstd_level = o.zstd};
        rc = writer_open(&w, o.out, &wo, o.force, &e);
        if (!rc) rc = rad_writer_set_kv(w, 0, &meta, &e);
        if (!rc) rc = rad_writer_set_kv(w, 1, &src.tok, &e);
        if (!rc) rc = rad_writer_set_kv(w, 2, &src.chat, &e);
        const uint8_t **bufs = calloc((size_t)plan.n + 1, sizeof *bufs);
        int *owned = calloc((size_t)plan.n + 1, sizeof *owned);
        if (!bufs || !owned) rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory");
        int tty = isatty(2) && strcmp(o.out, "-") != 0;
        for (int i = 0; i < plan.n && !rc; i++) {
            const PlanItem *it = &plan.items[i];
            progress(tty, i, plan.n, it->dst);
            if (it->n_planes > 1) { /* block-scaled f8: each plane as the source holds it */
                RadPlaneSrc ps[RAD_MAX_PLANES];
                for (uint32_t j = 0; j < it->n_planes && !rc; j++) {
                    const RadPlane *sp = &it->src[0]->planes[j];
                    if (!sp->data) rc = rad_err_set(&e, RAD_E_UNSUPPORTED, "tensor '%s': source data is not mapped", it->src[0]->name);
                    ps[j] = (RadPlaneSrc){sp->name, sp->data, sp->nbytes};
                }
                if (!rc) rc = rad_writer_add_tensor(w, it->dst, it->enc, it->rank, it->shape, it->n_planes, ps, &e);
                continue;
            }
            rc = plan_produce(&plan, it, &bufs[i], &owned[i], &e);
            RadPlaneSrc ps = {"data", bufs[i], it->bytes};
            if (!rc) rc = rad_writer_add_tensor(w, it->dst, it->enc, it->rank, it->shape, 1, &ps, &e);
        }
        if (!rc) progress(tty, plan.n, plan.n, "writing");
        if (!rc) rc = rad_writer_finish(w, &e);
        writer_close(w); /* removes the temporary unless finish succeeded */
        for (int i = 0; bufs && i < plan.n; i++)
            if (owned[i]) free((void *)bufs[i]);
        free(bufs);
        free(owned);
    }
    if (rc) fprintf(stderr, "rad-convert: %s\n", e.msg);
    if (declared) rad_graph_free(&g);
    if (kk) rad_meta_table_free(&mm, kk, kv);
    plan_free(&plan);
    rad_plugins_free(&plugins);
    rad_plugin_dirs_free(dirs, n_dirs);
    rad_dict_free(&meta);
    rad_model_free(&src);
    return rad_stdout_close("rad-convert", rc ? 1 + usage : 0);
}
