/* radiance — the engine: one-shot generation (-p), an interactive chat (--chat), tokenizer
 * round trips (--tokenize/--detokenize) and the debug views. The server is issue 5. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcommon/rad_engine.h"
#include "libcommon/rad_sampler.h"
#include "libcommon/rad_tok.h"

typedef struct Opts {
    const char *model, *prompt, *ids, *kernels;
    const char *plugin_dirs[16];
    int n_plugin_dirs;
    int n_predict, tokenize, detokenize, chat, debug_graph, debug_placement, print_ids, deterministic, fast;
    uint32_t threads, ctx, batch;
    RadSamplerParams sp;
} Opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: radiance --model M.rad -p TEXT [options]     one-shot generation, streamed to stdout\n"
            "       radiance --model M.rad --chat [options]      interactive chat in the model's chat format\n"
            "       radiance --model M.rad --tokenize|--detokenize   text on stdin -> ids, or ids -> text\n"
            "       radiance --model M.rad --debug-graph|--debug-placement\n"
            "  -n N               tokens to generate (default 128)\n"
            "  --temp T           temperature (0: greedy; default 0)\n"
            "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --presence-penalty P, --frequency-penalty P\n"
            "  --seed S           sampling seed (a run with a seed is reproducible)\n"
            "  --threads K        kernel threads (default: all cores)\n"
            "  --ctx N            context served (default: the model's, at most 8192)\n"
            "  --batch N          tokens per step (prefill chunk, default 512)\n"
            "  --kernels A,B      kernel libraries by name, in preference order (default: all installed)\n"
            "  --plugin-dir DIR   look for plugins in DIR first (repeatable)\n"
            "  --ids 1,2,3        the prompt as token ids instead of -p text\n"
            "  --print-ids        print generated token ids (one per line) instead of text\n"
            "  --deterministic    batch-invariant kernels first\n"
            "  --fast             allow kernels within 2e-2 of the reference (quantised GEMMs quantise\n"
            "                     activations to q8, as llama.cpp does); default: within 1e-3\n");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_num(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s || v < lo || v > hi) {
        fprintf(stderr, "radiance: %s %s: expected a number in [%g, %g]\n", flag, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_args(int argc, char **argv, Opts *o) {
    enum { TEMP = 256, TOPK, TOPP, MINP, REP, PRES, FREQ, SEED, THREADS, CTX, BATCH, KERNELS, PDIR, IDS, TOKENIZE,
           DETOK, CHAT, DGRAPH, DPLACE, PIDS, DET, FAST };
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'}, {"temp", required_argument, 0, TEMP},
        {"top-k", required_argument, 0, TOPK}, {"top-p", required_argument, 0, TOPP}, {"min-p", required_argument, 0, MINP},
        {"repeat-penalty", required_argument, 0, REP}, {"presence-penalty", required_argument, 0, PRES},
        {"frequency-penalty", required_argument, 0, FREQ}, {"seed", required_argument, 0, SEED},
        {"threads", required_argument, 0, THREADS}, {"ctx", required_argument, 0, CTX}, {"batch", required_argument, 0, BATCH},
        {"kernels", required_argument, 0, KERNELS}, {"plugin-dir", required_argument, 0, PDIR}, {"ids", required_argument, 0, IDS},
        {"tokenize", no_argument, 0, TOKENIZE}, {"detokenize", no_argument, 0, DETOK}, {"chat", no_argument, 0, CHAT},
        {"debug-graph", no_argument, 0, DGRAPH}, {"debug-placement", no_argument, 0, DPLACE}, {"print-ids", no_argument, 0, PIDS},
        {"deterministic", no_argument, 0, DET}, {"fast", no_argument, 0, FAST}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    o->n_predict = 128;
    o->sp = rad_sampler_defaults();
    int c;
    double v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "m:p:n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n': if (!parse_num("-n", optarg, 0, 1e9, &v)) return 2; o->n_predict = (int)v; break;
        case TEMP: if (!parse_num("--temp", optarg, 0, 100, &v)) return 2; o->sp.temperature = (float)v; break;
        case TOPK: if (!parse_num("--top-k", optarg, 0, 1e9, &v)) return 2; o->sp.top_k = (int32_t)v; break;
        case TOPP: if (!parse_num("--top-p", optarg, 1e-9, 1, &v)) return 2; o->sp.top_p = (float)v; break;
        case MINP: if (!parse_num("--min-p", optarg, 0, 1, &v)) return 2; o->sp.min_p = (float)v; break;
        case REP: if (!parse_num("--repeat-penalty", optarg, 1e-6, 100, &v)) return 2; o->sp.repetition_penalty = (float)v; break;
        case PRES: if (!parse_num("--presence-penalty", optarg, -100, 100, &v)) return 2; o->sp.presence_penalty = (float)v; break;
        case FREQ: if (!parse_num("--frequency-penalty", optarg, -100, 100, &v)) return 2; o->sp.frequency_penalty = (float)v; break;
        case SEED: o->sp.seed = strtoull(optarg, NULL, 10); break;
        case THREADS: if (!parse_num("--threads", optarg, 1, 1024, &v)) return 2; o->threads = (uint32_t)v; break;
        case CTX: if (!parse_num("--ctx", optarg, 16, 1 << 20, &v)) return 2; o->ctx = (uint32_t)v; break;
        case BATCH: if (!parse_num("--batch", optarg, 1, 65536, &v)) return 2; o->batch = (uint32_t)v; break;
        case KERNELS: o->kernels = optarg; break;
        case PDIR:
            if (o->n_plugin_dirs == 16) return fprintf(stderr, "radiance: too many --plugin-dir\n"), 2;
            o->plugin_dirs[o->n_plugin_dirs++] = optarg;
            break;
        case IDS: o->ids = optarg; break;
        case TOKENIZE: o->tokenize = 1; break;
        case DETOK: o->detokenize = 1; break;
        case CHAT: o->chat = 1; break;
        case DGRAPH: o->debug_graph = 1; break;
        case DPLACE: o->debug_placement = 1; break;
        case PIDS: o->print_ids = 1; break;
        case DET: o->deterministic = 1; break;
        case FAST: o->fast = 1; break;
        case 'h': usage(stdout); exit(0);
        default:
            fprintf(stderr, "radiance: unknown or incomplete option '%s' (see radiance --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc) return fprintf(stderr, "radiance: unexpected argument '%s'\n", argv[optind]), 2;
    if (!o->model) return fprintf(stderr, "radiance: --model is required (see radiance --help)\n"), 2;
    return 0;
}

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) return free(b), NULL;
            b = nb;
        }
    }
    if (b) b[len] = 0;
    *n = len;
    return b;
}

static int parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 64;
    *ids = malloc(cap * sizeof **ids);
    *n = 0;
    while (*ids && *s) {
        while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '\r') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX) return 0;
        if (*n == cap) *ids = realloc(*ids, (cap *= 2) * sizeof **ids);
        if (!*ids) return 0;
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
    }
    return *ids != NULL;
}

/* Generation state: prints text pieces as whole UTF-8 characters. */
typedef struct Out {
    char pend[16];
    int npend;
} Out;

static void emit(const RadTok *tok, Out *o, int32_t id, int print_ids) {
    if (print_ids) {
        printf("%d\n", id);
        fflush(stdout);
        return;
    }
    if (rad_tok_is_special(tok, id)) return; /* control tokens are not text */
    char buf[256];
    int n = rad_tok_piece(tok, id, buf, sizeof buf);
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    for (int i = 0; i < n; i++) {
        if (o->npend == (int)sizeof o->pend) { fwrite(o->pend, 1, (size_t)o->npend, stdout); o->npend = 0; }
        o->pend[o->npend++] = buf[i];
    }
    /* write all but an incomplete trailing UTF-8 sequence */
    int keep = 0;
    for (int i = o->npend - 1; i >= 0 && i >= o->npend - 4; i--) {
        unsigned char c = (unsigned char)o->pend[i];
        if ((c & 0xC0) == 0x80) continue;
        int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (o->npend - i < need) keep = o->npend - i;
        break;
    }
    fwrite(o->pend, 1, (size_t)(o->npend - keep), stdout);
    memmove(o->pend, o->pend + o->npend - keep, (size_t)keep);
    o->npend = keep;
    fflush(stdout);
}

static int is_stop(const RadTok *tok, int32_t id) {
    return id == rad_tok_eos(tok) || (rad_tok_eot(tok) >= 0 && id == rad_tok_eot(tok));
}

/* Feeds ids at *pos, then generates up to n_predict tokens, streaming them. */
static int generate(RadEngine *en, const RadTok *tok, RadSampler *s, const int32_t *ids, size_t n, uint32_t *pos,
                    int n_predict, int print_ids, double *t_prompt, double *t_gen, int *n_gen, RadErr *e) {
    for (size_t i = 0; i < n; i++) rad_sampler_accept(s, ids[i]);
    double t0 = now();
    int rc = rad_engine_forward(en, 0, ids, (uint32_t)n, *pos, 1, e);
    *pos += (uint32_t)n;
    *t_prompt += now() - t0;
    if (rc) return rc;
    Out out = {0};
    double t1 = now();
    for (int i = 0; i < n_predict; i++) {
        int32_t next = rad_sampler_sample(s, rad_engine_logits(en, NULL));
        if (is_stop(tok, next)) break;
        emit(tok, &out, next, print_ids);
        rad_sampler_accept(s, next);
        (*n_gen)++;
        if (i + 1 == n_predict) break;
        if ((rc = rad_engine_forward(en, 0, &next, 1, *pos, 1, e))) return rc;
        (*pos)++;
    }
    if (out.npend) fwrite(out.pend, 1, (size_t)out.npend, stdout);
    *t_gen += now() - t1;
    return RAD_OK;
}

static int run_chat(RadEngine *en, const RadTok *tok, Opts *o, RadErr *e) {
    const RadChatFormat *cf = en->arch->chat_format ? en->arch->chat_format(&en->meta) : NULL;
    if (!cf) return rad_err_set(e, RAD_E_UNSUPPORTED, "plugin '%s' gives no chat format for this model", en->arch->info->name);
    RadSampler s;
    int rc = rad_sampler_init(&s, &o->sp, rad_tok_n_vocab(tok), e);
    if (rc) return rc;
    uint32_t pos = 0;
    double tp = 0, tg = 0;
    int ng = 0, first = 1;
    char line[8192];
    fprintf(stderr, "radiance: chat (%s); an empty line or end of input quits\n", cf->kind);
    while (fputs("> ", stderr), fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) break;
        char *turn = malloc(strlen(line) + 4096);
        size_t k = 0;
        if (first && cf->bos && *cf->bos && rad_tok_bos(tok) < 0) k += (size_t)sprintf(turn + k, "%s", cf->bos);
        if (first && cf->default_system && !(cf->flags & RAD_CHAT_SYSTEM_IN_FIRST_USER))
            k += (size_t)sprintf(turn + k, "%s%s%s", cf->system_start, cf->default_system, cf->system_end);
        k += (size_t)sprintf(turn + k, "%s", cf->user_start);
        if (first && cf->default_system && (cf->flags & RAD_CHAT_SYSTEM_IN_FIRST_USER))
            k += (size_t)sprintf(turn + k, "%s%s%s", cf->system_start, cf->default_system, cf->system_end);
        k += (size_t)sprintf(turn + k, "%s%s%s", line, cf->user_end, cf->assistant_start);
        int32_t *ids;
        size_t n;
        rc = rad_tok_encode(tok, turn, k, first, &ids, &n, e);
        free(turn);
        if (rc) break;
        rc = generate(en, tok, &s, ids, n, &pos, o->n_predict, 0, &tp, &tg, &ng, e);
        free(ids);
        if (rc) break;
        printf("\n");
        /* close the turn in the cache so the next one follows it */
        size_t ne;
        int32_t *end_ids;
        if ((rc = rad_tok_encode(tok, cf->assistant_end, strlen(cf->assistant_end), 0, &end_ids, &ne, e))) break;
        if (ne) rc = rad_engine_forward(en, 0, end_ids, (uint32_t)ne, pos, 0, e);
        pos += (uint32_t)ne;
        free(end_ids);
        if (rc) break;
        first = 0;
    }
    rad_sampler_free(&s);
    return rc;
}

int main(int argc, char **argv) {
    Opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (!o.prompt && !o.ids && !o.tokenize && !o.detokenize && !o.chat && !o.debug_graph && !o.debug_placement) {
        fprintf(stderr, "radiance: nothing to do: give -p TEXT, --chat, --tokenize or a debug view (the server arrives with issue 5)\n");
        return 2;
    }
    RadErr e = {0};
    RadTok *tok = NULL;
    RadEngine en;
    int have_engine = 0;
    double t_load = now();
    if (o.tokenize || o.detokenize) { /* the tokenizer alone: no kernels, no plugin */
        RadModelFile m;
        rc = rad_model_open(o.model, &m, &e);
        if (!rc) rc = rad_tok_init(&tok, &m.tok, &e);
        size_t n = 0;
        char *in = rc ? NULL : read_all(stdin, &n);
        if (!rc && !in) rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory reading stdin");
        if (!rc && o.tokenize) {
            int32_t *ids;
            size_t k;
            if (!(rc = rad_tok_encode(tok, in, n, 1, &ids, &k, &e))) {
                for (size_t i = 0; i < k; i++) printf("%s%d", i ? " " : "", ids[i]);
                printf("\n");
                free(ids);
            }
        } else if (!rc) {
            int32_t *ids;
            size_t k;
            char *text;
            size_t len;
            if (!parse_ids(in, &ids, &k)) rc = rad_err_set(&e, RAD_E_ARG, "--detokenize: stdin is not a list of token ids");
            else if (!(rc = rad_tok_decode(tok, ids, k, 0, &text, &len, &e))) {
                fwrite(text, 1, len, stdout);
                free(text);
            }
            free(ids);
        }
        free(in);
        rad_tok_free(tok);
        rad_model_free(&m);
        if (rc) fprintf(stderr, "radiance: %s\n", e.msg);
        return rc ? 1 : 0;
    }
    RadEngineOpts eo = {.model = o.model, .plugin_dirs = o.plugin_dirs, .n_plugin_dirs = o.n_plugin_dirs, .kernels = o.kernels,
                        .n_threads = o.threads, .max_tok = o.batch ? o.batch : 512, .max_seqs = 1, .max_ctx = o.ctx,
                        .deterministic = o.deterministic, .max_tolerance = o.fast ? 2e-2 : 1e-3};
    rc = rad_engine_open(&en, &eo, &e);
    have_engine = 1;
    if (!rc) rc = rad_tok_init(&tok, &en.m.tok, &e);
    t_load = now() - t_load;
    if (!rc && o.debug_graph) rad_engine_dump_graph(&en, stdout);
    if (!rc && o.debug_placement) rad_engine_dump_placement(&en, stdout);
    double tp = 0, tg = 0;
    int ng = 0;
    size_t n_prompt = 0;
    if (!rc && o.chat) {
        rc = run_chat(&en, tok, &o, &e);
    } else if (!rc && (o.prompt || o.ids)) {
        int32_t *ids = NULL;
        if (o.ids) {
            if (!parse_ids(o.ids, &ids, &n_prompt) || !n_prompt) rc = rad_err_set(&e, RAD_E_ARG, "--ids: expected token ids like 1,2,3");
        } else {
            rc = rad_tok_encode(tok, o.prompt, strlen(o.prompt), 1, &ids, &n_prompt, &e);
            if (!rc && !n_prompt) rc = rad_err_set(&e, RAD_E_ARG, "-p: the prompt encodes to no tokens");
        }
        for (size_t i = 0; !rc && i < n_prompt; i++)
            if (ids[i] < 0 || ids[i] >= (int32_t)rad_tok_n_vocab(tok))
                rc = rad_err_set(&e, RAD_E_ARG, "--ids: token %d outside the vocabulary (%u)", ids[i], rad_tok_n_vocab(tok));
        RadSampler s;
        if (!rc) rc = rad_sampler_init(&s, &o.sp, rad_tok_n_vocab(tok), &e);
        if (!rc) {
            uint32_t pos = 0;
            if (o.prompt && !o.print_ids) fputs(o.prompt, stdout);
            rc = generate(&en, tok, &s, ids, n_prompt, &pos, o.n_predict, o.print_ids, &tp, &tg, &ng, &e);
            if (!o.print_ids) printf("\n");
            rad_sampler_free(&s);
        }
        free(ids);
    }
    if (rc) fprintf(stderr, "radiance: %s\n", e.msg);
    else if (o.prompt || o.ids || o.chat)
        fprintf(stderr, "radiance: load %.2f s; prompt %zu tokens in %.3f s (%.1f tok/s); generation %d tokens in %.3f s (%.1f tok/s); %u threads\n",
                t_load, n_prompt, tp, tp > 0 ? (double)n_prompt / tp : 0.0, ng, tg, tg > 0 ? ng / tg : 0.0, o.threads);
    rad_tok_free(tok);
    if (have_engine) rad_engine_close(&en);
    return rc ? 1 : 0;
}
