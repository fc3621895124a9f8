/* radiance — the engine: the OpenAI-compatible server (the default job; server.c), one-shot
 * generation (-p), an interactive chat (--chat), tokenizer round trips (--tokenize/--detokenize)
 * and the debug views. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libcommon/plugin/rad_select.h"
#include "libcommon/text/rad_chat.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/base/rad_num.h"
#include "libcommon/runtime/rad_sampler.h"
#include "libcommon/runtime/rad_sched.h"
#include "libcommon/base/rad_stdout.h"
#include "libcommon/tok/rad_tok.h"
#include "radiance.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: radiance --model M.rad [server options]      the OpenAI-compatible HTTP server (docs/SERVER.md)\n"
            "       radiance --model M.rad -p TEXT [options]     one-shot generation, streamed to stdout\n"
            "       radiance --model M.rad --chat [options]      interactive chat in the model's chat format\n"
            "       radiance --model M.rad --tokenize|--detokenize   text on stdin -> ids, or ids -> text\n"
            "       radiance --model M.rad --embed               an embedding model: each line on stdin -> one\n"
            "                  line of its vector's floats (docs/TOOLS.md, \"Embeddings\")\n"
            "       radiance --model M.rad --debug-graph|--debug-placement   the plan one-shot runs; with\n"
            "                  --max-seqs/--max-mixed-tok, the one the server makes under them\n"
            "  -n N               tokens to generate (default 128)\n"
            "  --temp T           temperature (0: greedy; default 0)\n"
            "  --top-k K, --top-p P, --min-p P, --repeat-penalty R, --presence-penalty P, --frequency-penalty P\n"
            "  --seed S           sampling seed (a run with a seed is reproducible)\n"
            "  --threads K        kernel threads (default: all cores); under --tp, shared out among the ranks\n"
            "  --tp N             tensor parallelism: N ranks, threads of this process, each with its slice of\n"
            "                     the weights and its own KV (docs/ENGINE.md, \"Tensor parallelism\")\n"
            "  --tp-wire W        exact (default): every all-reduce sums the ranks in rank order; lossy: those of\n"
            "                     --tp-wire-min-bytes (default 65536) or more in the order the ranks arrive\n"
            "  --ctx N            context served (default: the model's, at most 8192)\n"
            "  --kv-type T        KV cache element type: f32 (default), f16 or bf16\n"
            "  --kv-cache-dtype T --kv-type's types, or fp8_v4 / fp8_k6v4: the narrow fp8 layouts (where the\n"
            "                     plugin's probe serves them; give one of --kv-type and --kv-cache-dtype)\n"
            "deployment switches a plugin grants through its probe (refused at start-up, naming the plugin,\n"
            "where it does not; docs/PLUGINS.md, \"Probe bits\"):\n"
            "  --control-vector FILE  llama.cpp's control-vector GGUF, added to the residual stream per layer\n"
            "  --tp-attn-split rows   row-split prefill attention\n"
            "  --state-cache-dtype T  recurrent state width: f32 (default) or f16\n"
            "  --kv-resident N        keep N KV blocks resident and stream the rest\n"
            "  --batch N          tokens per step (prefill chunk, default 512)\n"
            "speculative decoding (docs/ENGINE.md, \"Speculative decoding\"; greedy text is the target's own):\n"
            "  --draft FILE       a draft model (.rad, the target's tokenizer) proposes tokens the target verifies\n"
            "  --spec ngram       prompt lookup: tokens that followed an earlier match of the last 2-4 tokens\n"
            "  --spec-depth K     drafts a row carries at most (1..16; default the plugin's probe, else 4)\n"
            "  --kernels A,B      kernel libraries by name, in preference order (default: all installed)\n"
            "  --plugin-dir DIR   look for plugins in DIR first (repeatable)\n"
            "  --tune FILE        a kernel tuning table (docs/TUNE.md); --tune-ignore-mismatch: warn, not refuse\n"
            "  --ids 1,2,3        the prompt as token ids instead of -p text\n"
            "  --print-ids        print generated token ids (one per line) instead of text\n"
            "  --ignore-eos       one-shot: EOS/EOT do not end generation (exactly -n tokens, as llama-bench)\n"
            "  --deterministic    batch-invariant kernels first\n"
            "  --profile          at exit, time per op and kernel a step (one-shot and chat)\n"
            "  --mmap             kernels read the weights in the file's mapping (no copy: less memory\n"
            "                     with several processes, slower decode); default: copied into huge pages\n"
            "  --no-verify        skip the weights' checksums at load; default: every plane read is verified\n"
            "                     as it is copied, and a mismatch is refused naming the tensor\n"
            "  --no-repack        keep every weight in its stored layout; default: a kernel library may\n"
            "                     pack the weights only it reads (libref: q4/q5/q8_0, q4_k, under --fast) at load\n"
            "  --fast             allow kernels within 2e-2 of the reference (quantised GEMMs quantise\n"
            "                     activations to q8, as llama.cpp does); default: within 1e-3\n"
            "  --max-tolerance T  allow kernels whose stated tolerance is within T (--fast is 2e-2)\n"
            "  --chat-special-tokens  in chat messages (--chat and /v1/chat/completions), text that spells a\n"
            "                     control token (<|im_end|>) is that token; default: message content is text\n"
            "server:\n"
            "  --host H           listen address (default 127.0.0.1)\n"
            "  --port P           TCP port (default 8080; 0: any free port, printed)\n"
            "  --api-key KEY      require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize\n"
            "                     (default: $RADIANCE_API_KEY when set, else none)\n"
            "  --served-model-name NAME   the model's name in the API (default: the container's file stem)\n"
            "  --max-body BYTES   request body limit, 413 beyond it (default 2097152)\n"
            "  --max-header BYTES request header limit, 431 beyond it (default 16384)\n"
            "  --max-conns N      open connections; requests on connections past it get 503 (default 2048)\n"
            "  --idle-timeout S   close a connection idle this long (default 60; 0: never)\n"
            "  --default-max-tokens N  a request that omits max_tokens generates at most N (default: OpenAI's,\n"
            "                     16 for /v1/completions, up to the context for chat)\n"
            "  --header-timeout S a request's headers must arrive within S seconds of the connection\n"
            "                     opening or of the previous answer ending (default 10; 0: no limit)\n"
            "  --body-timeout S   its body within S seconds of its headers, else 408 (default 30; 0: no limit)\n"
            "  --max-seqs N       sequences generated at once (default 16)\n"
            "  --kv-blocks N      KV cache blocks (default: max-seqs full contexts, within 1/4 of memory)\n"
            "  --max-mixed-tok N  tokens per engine step: decode rows plus prefill chunks (default 512)\n"
            "  --max-queue N      waiting requests before 429 (default 1024)\n"
            "  --no-prefix-cache  do not share prompt KV blocks between requests\n"
            "  --drain-timeout S  on SIGTERM/SIGINT/SIGHUP/SIGQUIT, seconds to let requests in flight finish (default 30)\n");
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Every numeric flag goes through rad_num: finite, in range, whole where it is a count. */
static int parse_num(const char *flag, const char *s, double lo, double hi, int whole, double *out) {
    RadErr e = {0};
    if (rad_num_f64(flag, s, lo, hi, whole, out, &e)) {
        fprintf(stderr, "radiance: %s\n", e.msg);
        return 0;
    }
    return 1;
}

static int parse_ids(const char *what, const char *s, int32_t **ids, size_t *n, RadErr *e);

static int parse_args(int argc, char **argv, Opts *o) {
    enum { TEMP = 256, TOPK, TOPP, MINP, REP, PRES, FREQ, SEED, THREADS, CTX, BATCH, KERNELS, PDIR, IDS, TOKENIZE,
           DETOK, CHAT, DGRAPH, DPLACE, PIDS, DET, FAST, HOST, PORT, APIKEY, SNAME, MAXBODY, MAXHDR, MAXCONNS,
           IDLE, MAXSEQS, MAXMIXED, MAXQUEUE, NOPREFIX, DRAIN, KVBLOCKS, PROFILE, MMAPW, KVTYPE, NOREPACK, NOVERIFY, CHATSPECIAL, HDRTIME, BODYTIME, DEFMAXTOK, TUNE, TUNEIGN, MAXTOL, KVCDT, CVEC, TPSPLIT, STATEDT, KVRES, TPN, TPWIRE, TPWMIN, IGNEOS, EMBED, DRAFT, SPEC, SPECDEPTH };
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'}, {"temp", required_argument, 0, TEMP},
        {"top-k", required_argument, 0, TOPK}, {"top-p", required_argument, 0, TOPP}, {"min-p", required_argument, 0, MINP},
        {"repeat-penalty", required_argument, 0, REP}, {"presence-penalty", required_argument, 0, PRES},
        {"frequency-penalty", required_argument, 0, FREQ}, {"seed", required_argument, 0, SEED},
        {"threads", required_argument, 0, THREADS}, {"ctx", required_argument, 0, CTX}, {"batch", required_argument, 0, BATCH},
        {"tune", required_argument, 0, TUNE}, {"tune-ignore-mismatch", no_argument, 0, TUNEIGN},
        {"kernels", required_argument, 0, KERNELS}, {"plugin-dir", required_argument, 0, PDIR}, {"ids", required_argument, 0, IDS},
        {"tokenize", no_argument, 0, TOKENIZE}, {"detokenize", no_argument, 0, DETOK}, {"chat", no_argument, 0, CHAT},
        {"chat-special-tokens", no_argument, 0, CHATSPECIAL},
        {"debug-graph", no_argument, 0, DGRAPH}, {"debug-placement", no_argument, 0, DPLACE}, {"print-ids", no_argument, 0, PIDS},
        {"ignore-eos", no_argument, 0, IGNEOS}, {"embed", no_argument, 0, EMBED},
        {"deterministic", no_argument, 0, DET}, {"fast", no_argument, 0, FAST}, {"max-tolerance", required_argument, 0, MAXTOL}, {"profile", no_argument, 0, PROFILE}, {"mmap", no_argument, 0, MMAPW}, {"no-repack", no_argument, 0, NOREPACK}, {"no-verify", no_argument, 0, NOVERIFY}, {"kv-type", required_argument, 0, KVTYPE}, {"help", no_argument, 0, 'h'},
        {"kv-cache-dtype", required_argument, 0, KVCDT}, {"control-vector", required_argument, 0, CVEC},
        {"tp-attn-split", required_argument, 0, TPSPLIT}, {"state-cache-dtype", required_argument, 0, STATEDT},
        {"kv-resident", required_argument, 0, KVRES}, {"tp", required_argument, 0, TPN},
        {"tp-wire", required_argument, 0, TPWIRE}, {"tp-wire-min-bytes", required_argument, 0, TPWMIN},
        {"draft", required_argument, 0, DRAFT}, {"spec", required_argument, 0, SPEC},
        {"spec-depth", required_argument, 0, SPECDEPTH},
        {"host", required_argument, 0, HOST}, {"port", required_argument, 0, PORT}, {"api-key", required_argument, 0, APIKEY},
        {"served-model-name", required_argument, 0, SNAME}, {"max-body", required_argument, 0, MAXBODY},
        {"max-header", required_argument, 0, MAXHDR}, {"max-conns", required_argument, 0, MAXCONNS},
        {"idle-timeout", required_argument, 0, IDLE}, {"max-seqs", required_argument, 0, MAXSEQS},
        {"header-timeout", required_argument, 0, HDRTIME}, {"body-timeout", required_argument, 0, BODYTIME},
        {"default-max-tokens", required_argument, 0, DEFMAXTOK},
        {"kv-blocks", required_argument, 0, KVBLOCKS},
        {"max-mixed-tok", required_argument, 0, MAXMIXED}, {"max-queue", required_argument, 0, MAXQUEUE},
        {"no-prefix-cache", no_argument, 0, NOPREFIX}, {"drain-timeout", required_argument, 0, DRAIN}, {0, 0, 0, 0}};
    o->n_predict = 128;
    o->sp = rad_sampler_defaults();
    o->host = "127.0.0.1";
    o->port = 8080;
    o->api_key = getenv("RADIANCE_API_KEY") && *getenv("RADIANCE_API_KEY") ? getenv("RADIANCE_API_KEY") : NULL;
    o->max_body = 2u << 20;
    o->max_header = 16384;
    o->max_conns = 2048;
    o->idle_timeout = 60;
    o->header_timeout = 10;
    o->body_timeout = 30;
    o->drain_timeout = 30;
    o->max_seqs = RAD_SERVE_MAX_SEQS;
    o->max_mixed_tok = RAD_SERVE_MAX_TOK;
    o->max_queue = 1024;
    int c;
    double v;
    opterr = 0;
    int li = 0;
    while ((c = getopt_long(argc, argv, "m:p:n:h", lo, &li)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n': if (!parse_num("-n", optarg, 0, 1e9, RAD_NUM_WHOLE, &v)) return 2; o->n_predict = (int)v; break;
        case TEMP: if (!parse_num("--temp", optarg, 0, 100, RAD_NUM_REAL, &v)) return 2; o->sp.temperature = (float)v; break;
        case TOPK: if (!parse_num("--top-k", optarg, 0, 1e9, RAD_NUM_WHOLE, &v)) return 2; o->sp.top_k = (int32_t)v; break;
        case TOPP: if (!parse_num("--top-p", optarg, 1e-9, 1, RAD_NUM_REAL, &v)) return 2; o->sp.top_p = (float)v; break;
        case MINP: if (!parse_num("--min-p", optarg, 0, 1, RAD_NUM_REAL, &v)) return 2; o->sp.min_p = (float)v; break;
        case REP: if (!parse_num("--repeat-penalty", optarg, 1e-6, 100, RAD_NUM_REAL, &v)) return 2; o->sp.repetition_penalty = (float)v; break;
        case PRES: if (!parse_num("--presence-penalty", optarg, -100, 100, RAD_NUM_REAL, &v)) return 2; o->sp.presence_penalty = (float)v; break;
        case FREQ: if (!parse_num("--frequency-penalty", optarg, -100, 100, RAD_NUM_REAL, &v)) return 2; o->sp.frequency_penalty = (float)v; break;
        case SEED: {
            RadErr e = {0};
            if (rad_num_u64("--seed", optarg, 0, UINT64_MAX, &o->sp.seed, &e))
                return fprintf(stderr, "radiance: %s\n", e.msg), 2;
            o->seed_given = 1;
            break;
        }
        case THREADS: if (!parse_num("--threads", optarg, 1, 1024, RAD_NUM_WHOLE, &v)) return 2; o->threads = (uint32_t)v; break;
        case CTX: if (!parse_num("--ctx", optarg, 16, 1 << 20, RAD_NUM_WHOLE, &v)) return 2; o->ctx = (uint32_t)v; break;
        case BATCH: if (!parse_num("--batch", optarg, 1, 65536, RAD_NUM_WHOLE, &v)) return 2; o->batch = (uint32_t)v; break;
        case KERNELS: o->kernels = optarg; break;
        case TUNE: o->tune = optarg; break;
        case TUNEIGN: o->tune_ignore_mismatch = 1; break;
        case PDIR:
            if (o->n_plugin_dirs == 16) return fprintf(stderr, "radiance: too many --plugin-dir\n"), 2;
            o->plugin_dirs[o->n_plugin_dirs++] = optarg;
            break;
        case IDS: { /* checked here, so a bad id is a usage error before the model loads */
            RadErr e = {0};
            int32_t *ids = NULL;
            size_t n = 0;
            int bad = parse_ids("--ids", optarg, &ids, &n, &e);
            free(ids);
            if (!bad && !n) bad = rad_err_set(&e, RAD_E_ARG, "--ids: expected token ids like 1,2,3");
            if (bad) return fprintf(stderr, "radiance: %s\n", e.msg), 2;
            o->ids = optarg;
            break;
        }
        case TOKENIZE: o->tokenize = 1; break;
        case EMBED: o->embed = 1; break;
        case DETOK: o->detokenize = 1; break;
        case CHAT: o->chat = 1; break;
        case CHATSPECIAL: o->chat_special = 1; break;
        case DGRAPH: o->debug_graph = 1; break;
        case DPLACE: o->debug_placement = 1; break;
        case PIDS: o->print_ids = 1; break;
        case IGNEOS: o->ignore_eos = 1; break;
        case DET: o->deterministic = 1; break;
        case FAST: o->fast = 1; break;
        case MAXTOL: if (!parse_num("--max-tolerance", optarg, 1e-9, 1, 0, &v)) return 2; o->max_tolerance = v; break;
        case PROFILE: o->profile = 1; break;
        case MMAPW: o->mmap_weights = 1; break;
        case NOREPACK: o->no_repack = 1; break;
        case NOVERIFY: o->no_verify = 1; break;
        case KVTYPE: case KVCDT: case CVEC: case TPSPLIT: case STATEDT: case KVRES: case TPN: case TPWIRE: case TPWMIN: { /* the deployment switches (docs/PLUGINS.md) */
            RadErr e = {0};
            char flag[32];
            snprintf(flag, sizeof flag, "--%s", lo[li].name);
            if (rad_engine_deploy_flag(&o->deploy, flag, optarg, &e)) return fprintf(stderr, "radiance: %s\n", e.msg), 2;
            break;
        }
        case DRAFT: o->draft = optarg; break;
        case SPEC:
            if (strcmp(optarg, "ngram") != 0)
                return fprintf(stderr, "radiance: --spec '%s': expected ngram (a draft model is --draft FILE)\n", optarg), 2;
            o->spec = RAD_SPEC_NGRAM;
            break;
        case SPECDEPTH:
            if (!parse_num("--spec-depth", optarg, 1, RAD_SPEC_DEPTH_MAX, RAD_NUM_WHOLE, &v)) return 2;
            o->spec_depth = (uint32_t)v;
            break;
        case HOST: o->host = optarg; break;
        case PORT: if (!parse_num("--port", optarg, 0, 65535, RAD_NUM_WHOLE, &v)) return 2; o->port = (unsigned)v; break;
        case APIKEY: o->api_key = *optarg ? optarg : NULL; break;
        case SNAME:
            if (!*optarg || strlen(optarg) > 200) return fprintf(stderr, "radiance: --served-model-name: 1 to 200 characters\n"), 2;
            o->served_model_name = optarg;
            break;
        case MAXBODY: if (!parse_num("--max-body", optarg, 1024, 1u << 30, RAD_NUM_WHOLE, &v)) return 2; o->max_body = (size_t)v; break;
        case MAXHDR: if (!parse_num("--max-header", optarg, 1024, 1u << 24, RAD_NUM_WHOLE, &v)) return 2; o->max_header = (size_t)v; break;
        case MAXCONNS: if (!parse_num("--max-conns", optarg, 1, 1 << 20, RAD_NUM_WHOLE, &v)) return 2; o->max_conns = (unsigned)v; break;
        case IDLE: if (!parse_num("--idle-timeout", optarg, 0, 86400, RAD_NUM_WHOLE, &v)) return 2; o->idle_timeout = (unsigned)v; break;
        case DEFMAXTOK:
            if (!parse_num("--default-max-tokens", optarg, 1, UINT32_MAX, RAD_NUM_WHOLE, &v)) return 2;
            o->default_max_tokens = (uint32_t)v;
            break;
        case HDRTIME: if (!parse_num("--header-timeout", optarg, 0, 86400, RAD_NUM_REAL, &o->header_timeout)) return 2; break;
        case BODYTIME: if (!parse_num("--body-timeout", optarg, 0, 86400, RAD_NUM_REAL, &o->body_timeout)) return 2; break;
        case MAXSEQS: if (!parse_num("--max-seqs", optarg, 1, 4096, RAD_NUM_WHOLE, &v)) return 2; o->max_seqs = (uint32_t)v, o->bounds_given = 1; break;
        case KVBLOCKS: if (!parse_num("--kv-blocks", optarg, 1, 1 << 24, RAD_NUM_WHOLE, &v)) return 2; o->kv_blocks = (uint32_t)v; break;
        case MAXMIXED: if (!parse_num("--max-mixed-tok", optarg, 1, 1 << 20, RAD_NUM_WHOLE, &v)) return 2; o->max_mixed_tok = (uint32_t)v, o->bounds_given = 1; break;
        case MAXQUEUE: if (!parse_num("--max-queue", optarg, 1, 1 << 20, RAD_NUM_WHOLE, &v)) return 2; o->max_queue = (uint32_t)v; break;
        case NOPREFIX: o->no_prefix_cache = 1; break;
        case DRAIN: if (!parse_num("--drain-timeout", optarg, 0, 86400, RAD_NUM_WHOLE, &v)) return 2; o->drain_timeout = (unsigned)v; break;
        case 'h': usage(stdout); exit(rad_stdout_close("radiance", 0));
        default:
            fprintf(stderr, "radiance: unknown or incomplete option '%s' (see radiance --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind != argc) return fprintf(stderr, "radiance: unexpected argument '%s'\n", argv[optind]), 2;
    if (!o->model) return fprintf(stderr, "radiance: --model is required (see radiance --help)\n"), 2;
    if (o->draft && o->spec == RAD_SPEC_NGRAM)
        return fprintf(stderr, "radiance: --draft and --spec ngram are two drafters: give one\n"), 2;
    if (o->draft) o->spec = RAD_SPEC_DRAFT;
    if (o->spec_depth && !o->spec) /* a flag that would change nothing is refused, not ignored */
        return fprintf(stderr, "radiance: --spec-depth needs a drafter (--draft FILE or --spec ngram)\n"), 2;
    if (!rad_select_tolerance(o->fast, o->max_tolerance, &o->max_tolerance))
        return fprintf(stderr, "radiance: --fast is --max-tolerance %g: give one of them\n", RAD_SELECT_FAST_TOLERANCE), 2;
    /* a flag that would change nothing is refused, not ignored: raw text parses special tokens already */
    if (o->chat_special && (o->prompt || o->ids || o->tokenize || o->detokenize))
        return fprintf(stderr, "radiance: --chat-special-tokens applies to --chat and the server's chat endpoint, "
                               "not to -p, --ids, --tokenize or --detokenize\n"), 2;
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

/* Token ids separated by commas or white space; each strictly digits within [0, INT32_MAX]
 * (the vocabulary's bound is the engine's check). `what` names the flag in the error. */
static int parse_ids(const char *what, const char *s, int32_t **ids, size_t *n, RadErr *e) {
    size_t cap = 64;
    *n = 0;
    if (!(*ids = malloc(cap * sizeof **ids))) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory", what);
    for (;;) {
        s += strspn(s, ", \t\r\n");
        if (!*s) return RAD_OK;
        size_t len = strcspn(s, ", \t\r\n");
        char tok[32];
        snprintf(tok, sizeof tok, "%.*s", (int)(len < sizeof tok ? len : sizeof tok - 1), s);
        uint64_t v;
        if (len >= sizeof tok) return rad_num_u64(what, s, 0, INT32_MAX, &v, e); /* too long: names it */
        int rc = rad_num_u64(what, tok, 0, INT32_MAX, &v, e);
        if (rc) return rc;
        if (*n == cap) {
            int32_t *nv = realloc(*ids, (cap *= 2) * sizeof **ids);
            if (!nv) return rad_err_set(e, RAD_E_NOMEM, "%s: out of memory (%zu ids)", what, *n);
            *ids = nv;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s += len;
    }
}

/* ---- generation: -p, --ids and --chat submit to the scheduler the server uses ---------------- */

/* The timing line's sums over a run's requests. */
typedef struct GenStats {
    size_t n_prompt;               /* prompt tokens computed (not served from the prefix cache) */
    double t_prompt, t_gen;        /* seconds: submit to the first token; the first token to the end */
    int n_gen;                     /* tokens generated and printed (a stop token is not one) */
} GenStats;

/* One request's sink: its text (or ids) to stdout as it comes, flushed at each event. */
typedef struct Gen {
    RadSched *sched;
    int print_ids;                 /* --print-ids: the token ids, one a line, instead of text */
    int drop;                      /* -n 0: the prompt is computed, the token it yields dropped */
    RadBuf *text;              /* the reply's text too (--chat), or NULL */
    RadGenFinish finish;           /* NONE until the request's finish event */
    int rc;                        /* a failed write (the request is then cancelled) or the request's error */
    RadErr *e;
    double t_submit, t_first, t_end;
    uint32_t n_computed;           /* prompt tokens not served from the prefix cache */
    int n_gen;
} Gen;

static void gen_sink(void *user, const RadGenEvent *ev) {
    Gen *g = user;
    if (ev->finish) {
        g->finish = ev->finish;
        g->t_end = now();
        g->n_computed = ev->n_prompt - ev->n_cached;
        if (ev->finish == RAD_FINISH_ERROR && !g->rc) g->rc = rad_err_set(g->e, RAD_E_IO, "%s", ev->msg ? ev->msg : "generation failed");
        return;
    }
    if (ev->token >= 0 && g->t_first <= 0) g->t_first = now();
    if (g->rc || g->drop) return; /* after a failed write nothing more is written */
    if (ev->token >= 0) g->n_gen++;
    if (g->print_ids) {
        if (ev->token >= 0) printf("%d\n", ev->token);
    } else if (ev->len) {
        fwrite(ev->text, 1, ev->len, stdout);
        if (g->text && rad_buf_put(g->text, ev->text, ev->len, g->e)) g->rc = RAD_E_NOMEM;
    }
    if (!g->rc) g->rc = rad_stdout_flush(g->e);
    if (g->rc) rad_sched_cancel(g->sched, ev->id);
}

/* Generates up to n_predict tokens after the prompt (ids[n]), streaming them, on this thread:
 * one request, the scheduler's loop run until it is done. stop_ids end it (--chat's turn end);
 * the reply's text is kept in `text` when given. n_predict is cut to the context's room. */
static int generate(RadSched *sched, const RadSamplerParams *sp, const int32_t *ids, size_t n, int n_predict,
                    const int32_t *stop_ids, uint32_t n_stop_ids, int print_ids, int ignore_eos, RadBuf *text, GenStats *st,
                    RadErr *e) {
    uint32_t max_ctx = rad_sched_max_ctx(sched);
    uint32_t room = n < max_ctx ? max_ctx - (uint32_t)n : 0;
    RadGenReq r = {.prompt = ids, .n_prompt = (uint32_t)n, .sp = *sp, .stop_ids = stop_ids, .n_stop_ids = n_stop_ids,
                   .ignore_eos = ignore_eos,
                   /* -n 0 computes the prompt all the same: one token, dropped */
                   .max_tokens = n_predict == 0 ? 1 : (uint32_t)n_predict < room ? (uint32_t)n_predict : room};
    if (!r.max_tokens) r.max_tokens = 1; /* no room at all: the scheduler says why */
    Gen g = {.sched = sched, .print_ids = print_ids, .drop = n_predict == 0, .text = text, .e = e, .t_submit = now()};
    uint64_t id;
    int rc = rad_sched_submit(sched, &r, gen_sink, &g, &id, e);
    if (rc) return rc;
    rad_sched_run_idle(sched);
    if (!g.finish && !g.rc) g.rc = rad_err_set(e, RAD_E_IO, "generation ended without a result"); /* never: idle means done */
    double t_first = g.t_first > 0 ? g.t_first : g.t_end;
    st->n_prompt += g.n_computed;
    st->t_prompt += t_first - g.t_submit;
    st->t_gen += g.t_end - t_first;
    st->n_gen += g.n_gen;
    return g.rc ? g.rc : rad_stdout_flush(e);
}

#define CHAT_MAX_LINE ((size_t)1 << 20) /* bytes in one --chat line (docs/SERVER.md) */

/* One --chat line of any length up to CHAT_MAX_LINE bytes, without its "\n", in *buf (grown as
 * needed). Returns 1 for a line, 0 at the end of input, -1 for a line over the bound (*nul = 0)
 * or holding a NUL byte (*nul = 1; the rest of a refused line is read and dropped), -2 when out
 * of memory. */
static int chat_read_line(FILE *f, char **buf, size_t *cap, size_t *len, int *nul) {
    size_t n = 0;
    int c, got = 0, over = 0;
    *nul = 0;
    while ((c = getc(f)) != EOF) {
        got = 1;
        if (c == '\n') break;
        if (c == 0) *nul = 1;
        if (over || *nul) continue;
        if (n == CHAT_MAX_LINE) {
            over = 1;
            continue;
        }
        if (n + 2 > *cap) {
            size_t nc = *cap ? 2 * *cap : 4096;
            if (nc > CHAT_MAX_LINE + 1) nc = CHAT_MAX_LINE + 1;
            char *nb = realloc(*buf, nc);
            if (!nb) return -2;
            *buf = nb;
            *cap = nc;
        }
        (*buf)[n++] = (char)c;
    }
    if (!got) return 0;
    if (over || *nul) return -1;
    if (!*buf && !(*buf = malloc(*cap = 1))) return -1;
    (*buf)[n] = 0;
    *len = n;
    return 1;
}

/* --chat: one line is one user turn. Each turn renders the whole conversation (as the model's
 * template would, so the prompt's tokens equal transformers' apply_chat_template), encodes it
 * with rad_chat_encode (the lines are content: text, not control tokens, unless
 * --chat-special-tokens) and submits it as one request: the prefix cache keeps the KV of what
 * the turns before computed. The reply ends at EOS/EOT or the format's turn end (stop ids). Turn
 * k (from 0) samples with seed + k. A line that is refused (over CHAT_MAX_LINE, a NUL byte,
 * past the context) is said on stderr in one line and the chat goes on. */
static int run_chat(RadEngine *en, RadSched *sched, const RadTok *tok, Opts *o, GenStats *st, RadErr *e) {
    const RadChatFormat *cf;
    int rc = rad_chat_format_get(rad_engine_arch(en), rad_engine_meta(en), &cf, e);
    if (rc) return rc;
    if (!cf) return rad_err_set(e, RAD_E_UNSUPPORTED, "plugin '%s' gives no chat format for this model", rad_engine_arch(en)->info->name);
    int32_t stop_ids[RAD_CHAT_MAX_STOP_IDS];
    uint32_t n_stop_ids;
    if ((rc = rad_chat_stop_ids(cf, tok, stop_ids, &n_stop_ids, e))) return rc;
    RadChatMsg *msgs = NULL;     /* the conversation; contents owned here */
    size_t n_msgs = 0;
    uint32_t max_ctx = rad_sched_max_ctx(sched);
    uint64_t turn = 0;
    char *line = NULL;
    size_t line_cap = 0, line_len = 0, line_no = 0;
    int got, nul;
    fprintf(stderr, "radiance: chat (%s); one line is one turn; an empty line or end of input quits\n", cf->kind);
    while (!rc && (fputs("> ", stderr), (got = chat_read_line(stdin, &line, &line_cap, &line_len, &nul)) != 0)) {
        line_no++;
        if (got == -2) {
            rc = rad_err_set(e, RAD_E_NOMEM, "--chat: out of memory reading line %zu", line_no);
            break;
        }
        if (got < 0) {
            if (nul) fprintf(stderr, "radiance: --chat: line %zu holds a NUL byte; not sent\n", line_no);
            else fprintf(stderr, "radiance: --chat: line %zu is longer than %zu bytes (1 MiB); not sent\n", line_no, CHAT_MAX_LINE);
            continue;
        }
        if (!line_len) break;
        RadChatMsg *nm = realloc(msgs, (n_msgs + 2) * sizeof *msgs);
        char *user = strdup(line);
        if (!nm || !user) {
            free(user);
            if (nm) msgs = nm;
            rc = rad_err_set(e, RAD_E_NOMEM, "out of memory (chat history)");
            break;
        }
        msgs = nm;
        msgs[n_msgs++] = (RadChatMsg){.role = RAD_ROLE_USER, .content = user};
        int32_t *ids;
        size_t n;
        unsigned flags = RAD_CHAT_GEN_PROMPT | (o->chat_special ? RAD_CHAT_SPECIAL_IN_CONTENT : 0);
        if ((rc = rad_chat_encode(cf, tok, msgs, n_msgs, flags, &ids, &n, NULL, NULL, e))) break;
        if (n >= max_ctx) { /* the turn leaves no room for a reply: say so, drop it, go on */
            if (n > max_ctx)
                fprintf(stderr, "radiance: --chat: line %zu makes the conversation %zu tokens, more than the context served "
                                "(%u, --ctx); not sent\n", line_no, n, max_ctx);
            else
                fprintf(stderr, "radiance: --chat: line %zu makes the conversation %zu tokens, the whole context served "
                                "(%u, --ctx), leaving no room for a reply; not sent\n", line_no, n, max_ctx);
            free(ids);
            free((char *)msgs[--n_msgs].content);
            continue;
        }
        RadBuf reply = {0};
        rc = rad_buf_put(&reply, "", 0, e);
        RadSamplerParams sp = o->sp;
        sp.seed += turn++;
        if (!rc) rc = generate(sched, &sp, ids, n, o->n_predict, stop_ids, n_stop_ids, 0, 0, &reply, st, e);
        free(ids);
        if (!rc) {
            printf("\n");
            msgs[n_msgs++] = (RadChatMsg){.role = RAD_ROLE_ASSISTANT, .content = reply.p};
        } else {
            rad_buf_free(&reply);
        }
    }
    free(line);
    for (size_t i = 0; i < n_msgs; i++) free((char *)msgs[i].content);
    free(msgs);
    return rc;
}

/* --embed: every line of stdin (its newline dropped; the last may lack one) tokenized with the
 * model's specials and checked before anything is printed, then embedded in steps of up to
 * max_seqs texts and max_tok tokens; one line of floats (%.9g, f32 round-trip) per input line. */
static int run_embed(const Opts *o) {
    RadErr e = {0};
    RadEngine *en = NULL;
    RadTok *tok = NULL;
    RadEngineOpts eo = {.model = o->model, .plugin_dirs = o->plugin_dirs, .n_plugin_dirs = o->n_plugin_dirs,
                        .kernels = o->kernels, .n_threads = o->threads, .max_tok = o->batch ? o->batch : 512,
                        .max_seqs = o->max_seqs, .max_ctx = o->ctx, .deterministic = o->deterministic,
                        .max_tolerance = o->max_tolerance, .profile = o->profile, .mmap_weights = o->mmap_weights,
                        .no_repack = o->no_repack, .no_verify = o->no_verify, .tune = o->tune,
                        .tune_ignore_mismatch = o->tune_ignore_mismatch};
    rad_engine_deploy_apply(&eo, &o->deploy);
    size_t n_in = 0, n_lines = 0;
    char *in = NULL;
    RadEngineText *texts = NULL;
    int32_t **ids = NULL;
    float *vec = NULL;
    int rc = rad_engine_open(&en, &eo, &e);
    if (!rc && !rad_engine_pooled_dim(en))
        rc = rad_err_set(&e, RAD_E_UNSUPPORTED, "%s: a generation model (plugin '%s' declares logits): --embed needs an "
                         "embedding model", o->model, rad_engine_arch(en)->info->name);
    if (!rc) rc = rad_tok_init(&tok, rad_engine_tok_data(en), &e);
    if (!rc && !(in = read_all(stdin, &n_in))) rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory reading stdin");
    for (size_t i = 0; !rc && i < n_in; i++) n_lines += in[i] == '\n';
    if (!rc && n_in && in[n_in - 1] != '\n') n_lines++;
    if (!rc && n_lines && (!(texts = calloc(n_lines, sizeof *texts)) || !(ids = calloc(n_lines, sizeof *ids))))
        rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory for %zu lines", n_lines);
    const uint32_t max = rc ? 0 : rad_engine_embed_max(en), dim = rc ? 0 : rad_engine_pooled_dim(en);
    char *p = in;
    for (size_t i = 0; !rc && i < n_lines; i++) {
        char *nl = memchr(p, '\n', (size_t)(in + n_in - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(in + n_in - p), k = 0;
        if (!(rc = rad_tok_encode(tok, p, len, 1, &ids[i], &k, &e))) {
            if (!k) rc = rad_err_set(&e, RAD_E_ARG, "--embed: line %zu encodes to no tokens", i + 1);
            else if (k > max)
                rc = rad_err_set(&e, RAD_E_LIMIT, "--embed: line %zu is %zu tokens; the model takes at most %u", i + 1, k, max);
        } else {
            char why[sizeof e.msg];
            snprintf(why, sizeof why, "%s", e.msg);
            rc = rad_err_set(&e, rc, "--embed: line %zu: %s", i + 1, why);
        }
        texts[i] = (RadEngineText){ids[i], (uint32_t)k};
        p += len + 1;
    }
    const RadEngineLimits lim = rc ? (RadEngineLimits){0} : rad_engine_limits(en);
    if (!rc && n_lines && !(vec = malloc((size_t)lim.max_seqs * dim * sizeof *vec)))
        rc = rad_err_set(&e, RAD_E_NOMEM, "out of memory");
    for (size_t i = 0; !rc && i < n_lines;) {
        uint32_t n = 0, t = 0;
        while (i + n < n_lines && n < lim.max_seqs && t + texts[i + n].n <= lim.max_tok) t += texts[i + n++].n;
        if ((rc = rad_engine_embed(en, texts + i, n, vec, &e))) { /* its "text k" is k lines after line i + 1 */
            char why[sizeof e.msg];
            snprintf(why, sizeof why, "%s", e.msg);
            rc = rad_err_set(&e, rc, "--embed: lines %zu-%zu: %s", i + 1, i + n, why);
            break;
        }
        for (uint32_t s = 0; s < n; s++)
            for (uint32_t d = 0; d < dim; d++) printf("%.9g%c", (double)vec[(size_t)s * dim + d], d + 1 < dim ? ' ' : '\n');
        i += n;
    }
    for (size_t i = 0; ids && i < n_lines; i++) free(ids[i]);
    free(ids);
    free(texts);
    free(vec);
    free(in);
    if (!rc) rc = rad_stdout_flush(&e);
    if (rc) fprintf(stderr, "radiance: %s\n", e.msg);
    if (!rc && o->profile) rad_engine_dump_profile(en, stderr);
    rad_tok_free(tok);
    rad_engine_close(en);
    return rad_stdout_close("radiance", rc ? 1 : 0);
}

int main(int argc, char **argv) {
    rad_stdout_init(); /* first: --help too; a closed pipe is EPIPE, not a death by SIGPIPE */
    Opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (!o.prompt && !o.ids && !o.tokenize && !o.detokenize && !o.chat && !o.debug_graph && !o.debug_placement && !o.embed)
        return serve(&o);
    RadErr e = {0};
    RadTok *tok = NULL;
    RadEngine *en = NULL;
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
            if ((rc = parse_ids("--detokenize: stdin token id", in, &ids, &k, &e))) {
            } else if (!(rc = rad_tok_decode(tok, ids, k, 0, &text, &len, &e))) {
                fwrite(text, 1, len, stdout);
                free(text);
            }
            free(ids);
        }
        free(in);
        rad_tok_free(tok);
        rad_model_free(&m);
        if (!rc) rc = rad_stdout_flush(&e);
        if (rc) fprintf(stderr, "radiance: %s\n", e.msg);
        return rad_stdout_close("radiance", rc ? 1 : 0);
    }
    if (o.embed) return run_embed(&o);
    RadEngineOpts eo = {.model = o.model, .plugin_dirs = o.plugin_dirs, .n_plugin_dirs = o.n_plugin_dirs, .kernels = o.kernels,
                        .n_threads = o.threads, .max_tok = o.batch ? o.batch : 512, .max_seqs = 1, .max_ctx = o.ctx,
                        .deterministic = o.deterministic, .max_tolerance = o.max_tolerance, .profile = o.profile,
                        .mmap_weights = o.mmap_weights, .no_repack = o.no_repack, .no_verify = o.no_verify,
                        .tune = o.tune, .tune_ignore_mismatch = o.tune_ignore_mismatch};
    rad_engine_deploy_apply(&eo, &o.deploy);
    if (!o.chat && !o.prompt && !o.ids && !o.tokenize && !o.detokenize && o.bounds_given) /* the server's plan, shown */
        eo.max_seqs = o.max_seqs, eo.max_tok = o.max_mixed_tok;
    eo.speculate = o.spec != RAD_SPEC_NONE, eo.spec_depth = o.spec_depth;
    rc = rad_engine_open(&en, &eo, &e);
    if (!rc && rad_engine_pooled_dim(en) && (o.chat || o.prompt || o.ids))
        rc = rad_err_set(&e, RAD_E_UNSUPPORTED, "%s: an embedding model (plugin '%s' declares a pooled output): it does not "
                         "generate; --embed embeds each line of stdin", o.model, rad_engine_arch(en)->info->name);
    if (!rc && rad_engine_tune_warning(en)) fprintf(stderr, "radiance: warning: %s\n", rad_engine_tune_warning(en));
    if (!rc && (o.chat || o.prompt || o.ids)) { /* a plan needs none */
        rc = rad_tok_init(&tok, rad_engine_tok_data(en), &e);
        /* a container without a tokenizer (rad-convert --no-tokenizer) runs ids in, ids out */
        if (rc && o.ids && o.print_ids && !o.chat && !o.prompt && o.spec == RAD_SPEC_NONE) rc = RAD_OK, tok = NULL, rad_err_clear(&e);
    }
    t_load = now() - t_load;
    if (!rc && o.debug_graph) rad_engine_dump_graph(en, stdout);
    if (!rc && o.debug_placement) rad_engine_dump_placement(en, stdout);
    GenStats st = {0};
    RadSched *sched = NULL;
    RadEngine *draft = NULL;
    RadSchedOpts so = {.max_seqs = 1, .max_mixed_tok = eo.max_tok, .prefix_cache = !o.no_prefix_cache};
    if (!rc && (o.chat || o.prompt || o.ids)) { /* one sequence; the prefix cache keeps a chat's turns */
        rc = spec_setup(&o, &eo, en, tok, &draft, &so, &e);
        if (!rc) rc = rad_sched_open(&sched, en, tok, &so, &e);
    }
    if (!rc && o.chat) {
        rc = run_chat(en, sched, tok, &o, &st, &e);
    } else if (!rc && (o.prompt || o.ids)) {
        int32_t *ids = NULL;
        size_t n_prompt = 0;
        if (o.ids) {
            if (!(rc = parse_ids("--ids", o.ids, &ids, &n_prompt, &e)) && !n_prompt)
                rc = rad_err_set(&e, RAD_E_ARG, "--ids: expected token ids like 1,2,3");
        } else {
            rc = rad_tok_encode(tok, o.prompt, strlen(o.prompt), 1, &ids, &n_prompt, &e);
            if (!rc && !n_prompt) rc = rad_err_set(&e, RAD_E_ARG, "-p: the prompt encodes to no tokens");
        }
        uint32_t nv = 0;
        if (tok) nv = rad_tok_n_vocab(tok);
        else rad_engine_logits(en, &nv);
        for (size_t i = 0; !rc && i < n_prompt; i++)
            if (ids[i] < 0 || ids[i] >= (int32_t)nv) rc = rad_err_set(&e, RAD_E_ARG, "--ids: token %d outside the vocabulary (%u)", ids[i], nv);
        if (!rc) {
            if (o.prompt && !o.print_ids) fputs(o.prompt, stdout);
            rc = generate(sched, &o.sp, ids, n_prompt, o.n_predict, NULL, 0, o.print_ids, o.ignore_eos, NULL, &st, &e);
            if (!o.print_ids) printf("\n");
        }
        free(ids);
    }
    RadSchedStats ss = {0};
    if (sched) rad_sched_stats(sched, &ss);
    rad_sched_close(sched);
    rad_engine_close(draft);
    if (!rc) rc = rad_stdout_flush(&e); /* before the timing line: a failed write is the one line */
    if (rc) fprintf(stderr, "radiance: %s\n", e.msg);
    else if (o.prompt || o.ids || o.chat)
        fprintf(stderr, "radiance: load %.2f s; prompt %zu tokens in %.3f s (%.1f tok/s); generation %d tokens in %.3f s (%.1f tok/s); %u threads%s\n",
                t_load, st.n_prompt, st.t_prompt, st.t_prompt > 0 ? (double)st.n_prompt / st.t_prompt : 0.0, st.n_gen, st.t_gen,
                st.t_gen > 0 ? st.n_gen / st.t_gen : 0.0, rad_engine_limits(en).n_threads,
                rad_engine_world(en) > 1 ? " a rank" : "");
    if (!rc && o.spec && (o.prompt || o.ids || o.chat))
        fprintf(stderr, "radiance: speculation (%s, depth %u): %" PRIu64 " rows drafted %" PRIu64 " tokens, %" PRIu64
                " accepted (%.1f%%), %.2f tokens a verify row\n", o.spec == RAD_SPEC_DRAFT ? "draft model" : "ngram",
                so.spec_depth, ss.spec_rows, ss.spec_drafted, ss.spec_accepted,
                ss.spec_drafted ? 100.0 * (double)ss.spec_accepted / (double)ss.spec_drafted : 0.0,
                ss.spec_rows ? 1.0 + (double)ss.spec_accepted / (double)ss.spec_rows : 0.0);
    if (!rc && o.profile) rad_engine_dump_profile(en, stderr);
    rad_tok_free(tok);
    rad_engine_close(en);
    return rad_stdout_close("radiance", rc ? 1 : 0);
}
