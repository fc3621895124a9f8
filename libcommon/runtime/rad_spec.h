/* rad_spec.h — speculative decoding's parts outside the scheduler: the drafters' kinds, prompt
 * lookup (n-gram) drafting, and a draft model's engine, opened beside the target's and checked
 * to share its vocabulary.
 * The scheduler runs the drafters and verifies their tokens (rad_sched.c; docs/ENGINE.md,
 * "Speculative decoding"). */
#ifndef RAD_SPEC_H
#define RAD_SPEC_H

#include <stdint.h>

#include "libcommon/base/rad_err.h"
#include "libcommon/runtime/rad_engine.h"
#include "libcommon/tok/rad_tok.h"

typedef enum RadSpecKind {
    RAD_SPEC_NONE = 0,
    RAD_SPEC_NGRAM = 1,            /* prompt lookup: the tokens that followed an earlier match of the last n */
    RAD_SPEC_DRAFT = 2,            /* a draft model (its own engine and KV), greedy */
} RadSpecKind;

/* Prompt lookup matches suffixes of 4 down to 2 tokens: a 1-token match (a newline, a space, a
 * bracket) is everywhere in code and drafts noise (replaying the benchmark's greedy outputs
 * through the drafter, 2..4 took the editing set from 1.28x to 1.51x; docs/BENCHMARKS.md). */
#define RAD_SPEC_NGRAM_MAX 4       /* the longest suffix prompt lookup matches */
#define RAD_SPEC_NGRAM_MIN 2       /* the shortest */

/* Prompt lookup over tok[0..n): for suffix lengths nmax down to nmin, the latest earlier place
 * where the last `len` tokens occur; the up to k tokens that followed it there (never past n) go
 * to out. Returns how many (0: no match). */
uint32_t rad_spec_ngram(const int32_t *tok, uint32_t n, uint32_t nmax, uint32_t nmin, uint32_t k, int32_t *out);

/* A draft model's tokenizer must be the target's, id for id: the same vocabulary size, every
 * token's bytes and special flag, the same end tokens. RAD_E_ARG naming `what` (the draft's file)
 * and the first difference. */
int rad_spec_check_vocab(const RadTok *target, const RadTok *draft, const char *what, RadErr *e);

/* Opens the draft model `path` for target `en` (opened with `to`): the same plugin path, kernel
 * libraries, threads, step bounds, context, tolerance, determinism and KV type, declared as a
 * drafter (scope "draft", RadBuildCtx.is_draft), none of the target's deployment switches.
 * Refused, naming the file, when its tokenizer is not the target's (tok). *out NULL on failure. */
int rad_spec_open_draft(const RadEngineOpts *to, const RadEngine *en, const RadTok *tok, const char *path, RadEngine **out,
                        RadErr *e);

#endif
