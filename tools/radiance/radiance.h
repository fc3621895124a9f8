/* radiance.h — what main.c parses and the server (server.c) runs with. */
#ifndef RADIANCE_H
#define RADIANCE_H

#include <stddef.h>
#include <stdint.h>

#include "libcommon/runtime/rad_engine.h"
#include "libcommon/runtime/rad_sampler.h"
#include "libcommon/runtime/rad_sched.h"
#include "libcommon/runtime/rad_spec.h"

typedef struct Opts {
    const char *model, *prompt, *ids, *kernels;
    const char *tune;       /* --tune FILE: a kernel tuning table (docs/TUNE.md) */
    int tune_ignore_mismatch; /* --tune-ignore-mismatch: a table for another key is ignored with a warning */
    const char *plugin_dirs[16];
    int n_plugin_dirs;
    int embed;              /* --embed: stdin lines -> vectors (an embedding model) */
    int n_predict, tokenize, detokenize, chat, debug_graph, debug_placement, print_ids, ignore_eos, deterministic, fast, profile, mmap_weights, no_repack, no_verify;
    RadEngineOpts deploy;   /* the deployment switches only (rad_engine_deploy_flag, rad_engine_deploy_apply): the
                               KV cache's type and layout (--kv-type / --kv-cache-dtype), control_vector,
                               tp_attn_rows, state_dtype, kv_resident */
    double max_tolerance;   /* --max-tolerance (--fast: RAD_SELECT_FAST_TOLERANCE); resolved by the parser */
    uint32_t threads, ctx, batch;
    RadSamplerParams sp;
    int seed_given;
    int chat_special;       /* --chat-special-tokens: chat content may spell control tokens */
    uint32_t default_max_tokens; /* --default-max-tokens: a request without max_tokens (0: OpenAI's defaults) */
    /* the server */
    const char *host, *api_key, *served_model_name;
    unsigned port;
    size_t max_body, max_header;
    unsigned max_conns, idle_timeout, drain_timeout;
    double header_timeout, body_timeout;  /* seconds for a request's head / body to arrive; 0: none */
    uint32_t max_seqs, max_mixed_tok, max_queue;
    int bounds_given;              /* --max-seqs or --max-mixed-tok given (--debug-graph then shows the server's plan) */
    uint32_t kv_blocks;            /* 0: max_seqs full contexts */
    int no_prefix_cache;
    /* speculative decoding: --spec ngram, --draft FILE, --spec-depth K (resolved by the parser:
       spec_depth is the depth served when spec is not NONE) */
    RadSpecKind spec;
    const char *draft;
    uint32_t spec_depth;
} Opts;

/* Speculative decoding for one engine: the target's max_spec into eo, and (--draft) the draft
 * model's engine opened beside it (*draft, NULL otherwise) and the scheduler's fields. */
int spec_setup(const Opts *o, const RadEngineOpts *eo, RadEngine *en, const RadTok *tok, RadEngine **draft, RadSchedOpts *so,
               RadErr *e);

/* Runs the server until SIGTERM/SIGINT/SIGHUP/SIGQUIT and the drain; returns the exit status. */
int serve(const Opts *o);

#endif
