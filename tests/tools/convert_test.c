/* rad-convert end to end: the default GGUF (and through a pipe), a random-weight bf16 Hugging
 * Face Llama folder this test writes, and every refusal. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "libcommon/tensor/rad_enc.h"
#include "libcommon/plugin/rad_graph.h"
#include "libcommon/tensor/rad_encode.h"
#include "libcommon/format/rad_model.h"

#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static char dir[256], conv[512], info[512];

static void setup(void) {
    const char *b = getenv("RAD_BUILD");
    snprintf(conv, sizeof conv, "%s/rad-convert", b ? b : "build");
    snprintf(info, sizeof info, "%s/rad-info", b ? b : "build");
    snprintf(dir, sizeof dir, "/tmp/rad-convert-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs a shell command with $CONV, $INFO and $D set; returns the exit status and stderr. */
static int run(const char *cmd, char **err) {
    char full[4096];
    /* $NT: the random-weight folders hold no tokenizer, which a convert refuses without it */
    snprintf(full, sizeof full, "CONV=%s; INFO=%s; D=%s; NT=--no-tokenizer; (%s) >%s/out 2>%s/err", conv, info, dir, cmd,
             dir, dir);
    int st = system(full);
    if (err) {
        char p[300];
        snprintf(p, sizeof p, "%s/err", dir);
        FILE *f = fopen(p, "rb");
        cr_assert_not_null(f);
        *err = calloc(1, 65536);
        size_t n = fread(*err, 1, 65535, f);
        (*err)[n] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int exists(const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

static float *dequant(const RadTensor *t) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->rank; i++) n *= t->shape[i];
    float *f = malloc(n * sizeof *f);
    RadErr e = {0};
    cr_assert_eq(rad_dequant(t->enc, t->planes[0].data, t->planes[0].nbytes, f, n, &e), RAD_OK, "%s", e.msg);
    return f;
}

TestSuite(convert, .init = setup, .fini = teardown);

Test(convert, gguf_to_rad_file_and_pipe) {
    char *err;
    cr_assert_eq(run("$CONV " MODEL " -o $D/m.rad && $INFO $D/m.rad | tail -n +2 > $D/a && "
                     "$CONV " MODEL " -o - | $INFO - | tail -n +2 > $D/b && cmp $D/a $D/b && $INFO --check $D/m.rad",
                     &err), 0, "%s", err);
    free(err);
    /* GGUF's q/k rows come back in Hugging Face's (rotate-half) order; every other weight as it was */
    char p[512];
    snprintf(p, sizeof p, "%s/m.rad", dir);
    RadModelFile g, r;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(MODEL, &g, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_model_open(p, &r, &e), RAD_OK, "%s", e.msg);
    const char *qk[2] = {"blk.0.attn_q.weight", "blk.7.attn_k.weight"};
    for (int w = 0; w < 2; w++) {
        const RadTensor *a = rad_model_find(&g, qk[w]), *b = rad_model_find(&r, qk[w]);
        cr_assert(a && b && a->enc == RAD_ENC_Q4_1 && b->enc == RAD_ENC_Q4_1);
        float *x = dequant(a), *y = dequant(b);
        uint64_t rows = a->shape[0], cols = a->shape[1], d = 64;
        for (uint64_t h = 0; h < rows / d; h++)
            for (uint64_t k = 0; k < 2; k++)
                for (uint64_t j = 0; j < d / 2; j++)
                    cr_assert_eq(memcmp(&y[(h * d + k * d / 2 + j) * cols], &x[(h * d + 2 * j + k) * cols], cols * sizeof(float)), 0,
                                 "%s head %lu row %lu", qk[w], (unsigned long)h, (unsigned long)j);
        free(x), free(y);
    }
    const RadTensor *a = rad_model_find(&g, "blk.3.ffn_down.weight"), *b = rad_model_find(&r, "blk.3.ffn_down.weight");
    cr_assert(a && b && a->planes[0].nbytes == b->planes[0].nbytes);
    cr_assert_eq(memcmp(a->planes[0].data, b->planes[0].data, a->planes[0].nbytes), 0);
    /* the tied head (the GGUF has no output.weight) is stored once: as the embedding, which
     * logits_gemm reads; the container holds the GGUF's tensors and no second copy */
    cr_assert_null(rad_model_find(&g, "output.weight"));
    cr_assert_null(rad_model_find(&r, "output.weight"), "a tied head is stored a second time");
    a = rad_model_find(&g, "token_embd.weight"), b = rad_model_find(&r, "tok_embd.weight");
    cr_assert(a && b && a->planes[0].nbytes == b->planes[0].nbytes);
    cr_assert_eq(memcmp(a->planes[0].data, b->planes[0].data, a->planes[0].nbytes), 0);
    cr_assert_eq(r.n_tensors, g.n_tensors);
    const char *q = NULL, *o = NULL;
    rad_dict_gets(&r.meta, "model.quant", &q, NULL);
    rad_dict_gets(&r.meta, "model.quant_origin", &o, NULL);
    cr_assert_str_eq(q, "q4_1");
    cr_assert_str_eq(o, "import:gguf");
    rad_model_free(&g), rad_model_free(&r);
}

/* ---- a random-weight bf16 Hugging Face Llama folder ------------------------------------------ */

enum { L = 2, E = 64, H = 4, KV = 2, HD = 16, FF = 96, V = 128 };

static uint16_t bf16_of(float f) { return rad_f32_to_bf16(f); }

typedef struct Tw {
    char name[96];
    uint64_t shape[2];
    int rank;
} Tw;

/* Writes config.json and model.safetensors; `drop` omits one tensor, `ff_cfg` lies about n_ff,
 * `tie` is config's tie_word_embeddings (0 false, 1 true, -1 no such key). */
static void write_hf_tie(const char *sub, const char *drop, int ff_cfg, const char *arch, int tie) {
    char p[512], cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/%s", dir, sub);
    cr_assert_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/%s/config.json", dir, sub);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"llama\", \"hidden_size\": %d, \"intermediate_size\": %d,"
               " \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,"
               " \"vocab_size\": %d, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,"
               "%s \"torch_dtype\": \"bfloat16\"}\n",
            arch, E, ff_cfg, L, H, KV, HD, V,
            tie < 0 ? "" : tie ? " \"tie_word_embeddings\": true," : " \"tie_word_embeddings\": false,");
    fclose(f);
    /* transformers writes model_max_length = int(1e30): more digits than any JSON integer type */
    snprintf(p, sizeof p, "%s/%s/tokenizer_config.json", dir, sub);
    f = fopen(p, "w");
    fprintf(f, "{\"model_max_length\": 1000000000000000019884624838656, \"note\": \"12345678901234567890123\"}\n");
    fclose(f);
    Tw t[64];
    int n = 0;
    t[n++] = (Tw){"model.embed_tokens.weight", {V, E}, 2};
    t[n++] = (Tw){"model.norm.weight", {E, 0}, 1};
    t[n++] = (Tw){"lm_head.weight", {V, E}, 2};
    for (int l = 0; l < L; l++) {
        const struct { const char *s; uint64_t r, c; int rank; } per[] = {
            {"input_layernorm", E, 0, 1}, {"post_attention_layernorm", E, 0, 1},
            {"self_attn.q_proj", H * HD, E, 2}, {"self_attn.k_proj", KV * HD, E, 2}, {"self_attn.v_proj", KV * HD, E, 2},
            {"self_attn.o_proj", E, H * HD, 2}, {"mlp.gate_proj", FF, E, 2}, {"mlp.up_proj", FF, E, 2}, {"mlp.down_proj", E, FF, 2}};
        for (size_t i = 0; i < sizeof per / sizeof per[0]; i++) {
            snprintf(t[n].name, sizeof t[n].name, "model.layers.%d.%s.weight", l, per[i].s);
            t[n].shape[0] = per[i].r, t[n].shape[1] = per[i].c, t[n].rank = per[i].rank;
            n++;
        }
    }
    char *hdr = calloc(1, 65536);
    size_t k = 0;
    uint64_t off = 0;
    k += (size_t)sprintf(hdr + k, "{");
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (drop && strcmp(drop, t[i].name) == 0) continue;
        uint64_t elems = t[i].shape[0] * (t[i].rank == 2 ? t[i].shape[1] : 1);
        if (t[i].rank == 2)
            k += (size_t)sprintf(hdr + k, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lu,%lu],\"data_offsets\":[%lu,%lu]}", first ? "" : ",",
                                 t[i].name, (unsigned long)t[i].shape[0], (unsigned long)t[i].shape[1], (unsigned long)off,
                                 (unsigned long)(off + elems * 2));
        else
            k += (size_t)sprintf(hdr + k, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lu],\"data_offsets\":[%lu,%lu]}", first ? "" : ",",
                                 t[i].name, (unsigned long)t[i].shape[0], (unsigned long)off, (unsigned long)(off + elems * 2));
        off += elems * 2;
        first = 0;
    }
    k += (size_t)sprintf(hdr + k, "}");
    while (k % 8) hdr[k++] = ' ';
    snprintf(p, sizeof p, "%s/%s/model.safetensors", dir, sub);
    f = fopen(p, "wb");
    uint64_t hl = k;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, k, f);
    unsigned seed = 12345;
    for (uint64_t i = 0; i < off / 2; i++) {
        seed = seed * 1103515245u + 12345u;
        float x = ((float)((seed >> 8) & 0xffff) / 65535.0f - 0.5f) * 0.2f;
        uint16_t b = bf16_of(x);
        fwrite(&b, 2, 1, f);
    }
    fclose(f);
    free(hdr);
}

static void write_hf(const char *sub, const char *drop, int ff_cfg, const char *arch) {
    write_hf_tie(sub, drop, ff_cfg, arch, 0);
}

static void compare_to_source(const char *hf_sub, const char *rad_rel, RadEnc want_linear) {
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", dir, hf_sub);
    snprintf(b, sizeof b, "%s/%s", dir, rad_rel);
    RadModelFile s, r;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(a, &s, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(rad_model_open(b, &r, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(r.n_tensors, 3 + 9 * L);
    const struct { const char *src, *dst; } pairs[] = {
        {"model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight"},
        {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.layers.1.input_layernorm.weight", "blk.1.attn_norm.weight"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const RadTensor *x = rad_model_find(&s, pairs[i].src), *y = rad_model_find(&r, pairs[i].dst);
        cr_assert(x && y, "%s", pairs[i].dst);
        cr_assert_eq(x->rank, y->rank);
        cr_assert_eq(memcmp(x->shape, y->shape, x->rank * sizeof x->shape[0]), 0);
        float *fx = dequant(x), *fy = dequant(y);
        uint64_t n = x->shape[0] * (x->rank == 2 ? x->shape[1] : 1);
        RadEnc want = x->rank == 2 ? want_linear : (want_linear == RAD_ENC_Q8_0 ? RAD_ENC_BF16 : want_linear);
        cr_assert_eq(y->enc, want, "%s is %d", pairs[i].dst, y->enc);
        if (want == RAD_ENC_Q8_0) { /* equals the oracle-checked encoder applied to the source values */
            uint64_t nb;
            cr_assert_eq(rad_encode_plan(RAD_ENC_Q8_0, x->rank, x->shape, NULL, &nb, &e), RAD_OK);
            uint8_t *q = malloc(nb);
            cr_assert_eq(rad_encode(RAD_ENC_Q8_0, fx, n, q, nb, &e), RAD_OK, "%s", e.msg);
            cr_assert_eq(memcmp(q, y->planes[0].data, nb), 0, "%s", pairs[i].dst);
            free(q);
        } else { /* bf16 kept, or widened to f32: the values are exact */
            cr_assert_eq(memcmp(fx, fy, n * sizeof(float)), 0, "%s", pairs[i].dst);
        }
        free(fx), free(fy);
    }
    rad_model_free(&s), rad_model_free(&r);
}

Test(convert, random_bf16_hf_llama_at_each_quant) {
    write_hf("hf", NULL, FF, "LlamaForCausalLM");
    char *err;
    cr_assert_eq(run("$CONV $NT $D/hf -o $D/keep.rad && $CONV $NT $D/hf --quant f32 -o $D/f32.rad && "
                     "$CONV $NT $D/hf --quant q8_0 -o $D/q8.rad && $INFO --check $D/q8.rad", &err), 0, "%s", err);
    free(err);
    compare_to_source("hf", "keep.rad", RAD_ENC_BF16);
    compare_to_source("hf", "f32.rad", RAD_ENC_F32);
    compare_to_source("hf", "q8.rad", RAD_ENC_Q8_0);
    /* an archive of the folder converts the same */
    cr_assert_eq(run("tar -C $D -cf $D/hf.tar hf && $CONV $NT $D/hf.tar -o $D/tar.rad && "
                     "$INFO --json --tensors $D/tar.rad | jq -S 'del(.file)' > $D/x && "
                     "$INFO --json --tensors $D/keep.rad | jq -S 'del(.file)' > $D/y && cmp $D/x $D/y", &err), 0, "%s", err);
    free(err);
}

Test(convert, plan_only_writes_nothing_and_tells) {
    write_hf("hf", NULL, FF, "LlamaForCausalLM");
    char *err;
    cr_assert_eq(run("$CONV $NT $D/hf --plan-only -v -o $D/p.rad > $D/plan && grep -q 'blk.1.ffn_up.weight' $D/plan && "
                     "grep -q \"plugin 'llama'\" $D/plan && grep -q 'note: llama: 2 layers' $D/plan", &err), 0, "%s", err);
    free(err);
    cr_assert(!exists("p.rad"));
}

static void refused(const char *cmd, const char *needle, const char *must_not_exist) {
    char *err;
    int rc = run(cmd, &err);
    cr_assert_eq(rc, 1, "exit %d for %s: %s", rc, cmd, err);
    cr_assert(strstr(err, needle) != NULL, "'%s' not in: %s", needle, err);
    cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
    if (must_not_exist) cr_assert(!exists(must_not_exist), "%s left behind", must_not_exist);
    char ls[600];
    snprintf(ls, sizeof ls, "! ls %s | grep -q tmp", dir);
    cr_assert_eq(system(ls), 0, "a temporary was left behind");
    free(err);
}

static void open_rel(const char *rel, RadModelFile *m) {
    char p[512];
    RadErr e = {0};
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    cr_assert_eq(rad_model_open(p, m, &e), RAD_OK, "%s", e.msg);
}

static uint64_t tensor_bytes(const char *rel) {
    RadModelFile m;
    open_rel(rel, &m);
    uint64_t n = 0;
    for (uint64_t i = 0; i < m.n_tensors; i++)
        for (uint32_t j = 0; j < m.tensors[i].n_planes; j++) n += m.tensors[i].planes[j].nbytes;
    rad_model_free(&m);
    return n;
}

/* The head and the embedding of a converted container: `head` null when not stored. */
static void head_of(const RadModelFile *r, const RadTensor **embd, const RadTensor **head) {
    *embd = rad_model_find(r, "tok_embd.weight");
    *head = rad_model_find(r, "output.weight");
    cr_assert_not_null(*embd);
}

/* A tied head (no lm_head.weight in the checkpoint) is stored once, as the embedding, which
 * logits_gemm reads; a checkpoint with a head of its own keeps both, whatever its config says;
 * a config that says untied but ships no head is refused. */
Test(convert, tied_head_stored_once_untied_keeps_both) {
    char *err;
    const RadTensor *embd, *head, *x;
    RadModelFile s, r;
    RadErr e = {0};
    /* untied: the random bf16 fixture keeps both, the head byte for byte lm_head.weight */
    cr_assert_eq(run("$CONV $NT tests/fixtures/tiny-llama-bf16 -o $D/untied.rad && "
                     "$INFO --json --tensors $D/untied.rad | jq -e 'any(.tensors[]; .name == \"output.weight\") and "
                     "any(.tensors[]; .name == \"tok_embd.weight\")' && "
                     "$CONV $NT tests/fixtures/tiny-llama-bf16 --plan-only -v > $D/plan_u && grep -q 'untied lm_head' $D/plan_u && "
                     "! grep -q 'view of the embedding' $D/plan_u", &err), 0, "%s", err);
    free(err);
    cr_assert_eq(rad_model_open("tests/fixtures/tiny-llama-bf16", &s, &e), RAD_OK, "%s", e.msg);
    open_rel("untied.rad", &r);
    head_of(&r, &embd, &head);
    x = rad_model_find(&s, "lm_head.weight");
    cr_assert(head && x && head->planes[0].nbytes == x->planes[0].nbytes);
    cr_assert_eq(memcmp(head->planes[0].data, x->planes[0].data, x->planes[0].nbytes), 0);
    rad_model_free(&s), rad_model_free(&r);

    /* tied (config says so, no lm_head.weight): one matrix, at each --quant, and plan -v says so */
    write_hf("hf", NULL, FF, "LlamaForCausalLM");
    write_hf_tie("tied", "lm_head.weight", FF, "LlamaForCausalLM", 1);
    cr_assert_eq(run("$CONV $NT $D/hf -o $D/hf.rad && cp tests/fixtures/hf/tiny-llama/tokenizer.json $D/tied/ && "
                     "$CONV $NT $D/tied -o $D/tied.rad && $CONV $NT $D/tied --quant q8_0 -o $D/tied_q8.rad && "
                     "$CONV $NT $D/tied --quant f32 -o $D/tied_f32.rad && $CONV $NT $D/tied.rad -o $D/tied_again.rad && "
                     "for f in tied tied_q8 tied_f32 tied_again; do $INFO --check $D/$f.rad && "
                     "$INFO --json --tensors $D/$f.rad | jq -e '(any(.tensors[]; .name == \"output.weight\") | not) and "
                     "any(.tensors[]; .name == \"tok_embd.weight\")' || exit 1; done && "
                     "$CONV $NT $D/tied --plan-only -v > $D/plan_t && grep -q 'note: llama: .*, tied lm_head' $D/plan_t && "
                     "grep -q 'head: tied, a view of the embedding: logits_gemm reads tok_embd.weight' $D/plan_t && "
                     "! grep -q '^  output.weight ' $D/plan_t", &err), 0, "%s", err);
    free(err);
    /* the same weights but the head: the tensors of tied.rad are one bf16 [V, E] fewer bytes */
    cr_assert_eq(tensor_bytes("hf.rad") - tensor_bytes("tied.rad"), (uint64_t)V * E * 2);
    const struct { const char *rel; RadEnc enc; } tied[] = {
        {"tied.rad", RAD_ENC_BF16}, {"tied_q8.rad", RAD_ENC_Q8_0}, {"tied_f32.rad", RAD_ENC_F32}, {"tied_again.rad", RAD_ENC_BF16}};
    for (size_t i = 0; i < sizeof tied / sizeof tied[0]; i++) {
        open_rel(tied[i].rel, &r);
        head_of(&r, &embd, &head);
        cr_assert_null(head, "%s stores the tied head a second time", tied[i].rel);
        cr_assert_eq(embd->enc, tied[i].enc, "%s: the embedding (and so the head) is %d", tied[i].rel, embd->enc);
        cr_assert_eq(r.n_tensors, 2 + 9 * L, "%s", tied[i].rel);
        rad_model_free(&r);
    }
    /* the engine serves it: logits_gemm reads the embedding */
    const char *b = getenv("RAD_BUILD");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/radiance --model $D/tied.rad --debug-graph > $D/g 2>&1; "
             "grep -q 'logits_gemm *tok_embd.weight(bf16)' $D/g || (cat $D/g >&2; exit 1)", b ? b : "build");
    cr_assert_eq(run(cmd, &err), 0, "%s", err);
    free(err);

    /* no tie_word_embeddings key and no lm_head.weight: tied (the reader infers it) */
    write_hf_tie("nokey", "lm_head.weight", FF, "LlamaForCausalLM", -1);
    cr_assert_eq(run("$CONV $NT $D/nokey -o $D/nokey.rad", &err), 0, "%s", err);
    free(err);
    open_rel("nokey.rad", &r);
    head_of(&r, &embd, &head);
    cr_assert_null(head);
    rad_model_free(&r);

    /* a tied config that ships lm_head.weight anyway keeps both (the checkpoint's own head wins) */
    write_hf_tie("both", NULL, FF, "LlamaForCausalLM", 1);
    cr_assert_eq(run("$CONV $NT $D/both -o $D/both.rad", &err), 0, "%s", err);
    free(err);
    snprintf(cmd, sizeof cmd, "%s/both", dir);
    cr_assert_eq(rad_model_open(cmd, &s, &e), RAD_OK, "%s", e.msg);
    open_rel("both.rad", &r);
    head_of(&r, &embd, &head);
    x = rad_model_find(&s, "lm_head.weight");
    cr_assert(head && x && head->planes[0].nbytes == x->planes[0].nbytes);
    cr_assert_eq(memcmp(head->planes[0].data, x->planes[0].data, x->planes[0].nbytes), 0);
    cr_assert_eq(r.n_tensors, 3 + 9 * L);
    rad_model_free(&s), rad_model_free(&r);

    /* an untied config without its head is an error, not a silent fallback to the embedding */
    write_hf_tie("nohead", "lm_head.weight", FF, "LlamaForCausalLM", 0);
    refused("$CONV $NT $D/nohead -o $D/nohead.rad", "missing tensor: the plugin's 'output.weight' needs one of 'lm_head.weight'",
            "nohead.rad");
}

Test(convert, refusals_are_one_line_and_leave_nothing) {
    write_hf("unknown", NULL, FF, "FrobnicatorForCausalLM");
    refused("$CONV $NT $D/unknown -o $D/u.rad", "unknown architecture 'FrobnicatorForCausalLM'; installed: ", "u.rad");
    write_hf("missing", "model.layers.1.mlp.up_proj.weight", FF, "LlamaForCausalLM");
    refused("$CONV $NT $D/missing -o $D/m.rad", "missing tensor: the plugin's 'blk.1.ffn_up.weight' needs one of 'model.layers.1.mlp.up_proj.weight'", "m.rad");
    refused("$CONV $NT $D/missing --plan-only", "missing tensor", NULL);
    write_hf("shape", NULL, FF + 32, "LlamaForCausalLM");
    refused("$CONV $NT $D/shape -o $D/s.rad", "shape mismatch: declared [128,64], stored [96,64]", "s.rad");
    write_hf("hf", NULL, FF, "LlamaForCausalLM");
    refused("$CONV $NT $D/hf --set model.quant=awq -o $D/q.rad", "no plugin for ('llama', \"awq\")", "q.rad");
    cr_assert_eq(run("$CONV $NT $D/hf -o $D/out.rad", NULL), 0);
    refused("$CONV $NT $D/hf -o $D/out.rad", "exists (use --force", NULL);
    cr_assert_eq(run("$CONV $NT $D/hf -o $D/out.rad --force", NULL), 0);
    refused("$CONV $NT $D/nothing-here -o $D/n.rad", "nothing-here", "n.rad");
}

Test(convert, rad_info_lists_the_three_llama_plugins) {
    char *err;
    cr_assert_eq(run("$INFO --plugins --json > $D/p.json && "
                     "jq -e '[.plugins[] | select(.arch_id == \"llama\")] | length == 3' $D/p.json && "
                     "jq -e '.plugins[] | select(.name == \"llama\") | .quant == \"\" and .version != \"\"' $D/p.json && "
                     "jq -e '.plugins[] | select(.name == \"llama_ggml\") | .quant == \"ggml\" and .serves_imports' $D/p.json && "
                     "jq -e '.plugins[] | select(.name == \"llama_fp8\") | .quant == \"fp8_e4m3\" and (.serves_imports | not)' $D/p.json && "
                     "$INFO --plugins | grep -q llama_ggml", &err), 0, "%s", err);
    free(err);
}

Test(convert, vocab_only_from_a_gguf_and_a_tokenizer_only_folder) {
    char *err;
    const char *b = getenv("RAD_BUILD");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "$CONV " MODEL " --vocab-only -o $D/v.rad && $INFO --json --tensors $D/v.rad > $D/j && "
             "jq -e '.totals.tensors == 0 and .tokenizer.n_tokens == 49152 and .chat[\"chat.kind\"] == \"chatml\"' $D/j && "
             "$CONV " MODEL " -o $D/full.rad && "
             "printf 'Hello world 12345 <|im_start|>' | %s/radiance --model $D/v.rad --tokenize > $D/a && "
             "printf 'Hello world 12345 <|im_start|>' | %s/radiance --model $D/full.rad --tokenize > $D/b && cmp $D/a $D/b && "
             "mkdir $D/tok && cp tests/fixtures/hf/tiny-llama/tokenizer.json tests/fixtures/hf/tiny-llama/tokenizer_config.json $D/tok && "
             "$CONV $D/tok --vocab-only -o $D/t.rad && $INFO --json $D/t.rad | jq -e '.tokenizer.n_tokens > 0'",
             b ? b : "build", b ? b : "build");
    cr_assert_eq(run(cmd, &err), 0, "%s", err);
    free(err);
    refused("mkdir -p $D/empty && $CONV $D/empty --vocab-only -o $D/e.rad", "no tokenizer", "e.rad");
}

/* What a plan leaves out of the source is refused unless a flag says so (docs/CONVERT.md): a
 * checkpoint without a tokenizer, and tensors no name-map entry reads, as when the config says
 * fewer layers than the tensors hold. */
Test(convert, no_tokenizer_and_unclaimed_tensors_are_refused) {
    write_hf("hf", NULL, FF, "LlamaForCausalLM");
    refused("$CONV $D/hf -o $D/x.rad", "hf: holds no tokenizer (no tokenizer.json", "x.rad");
    refused("$CONV $D/hf --plan-only", "holds no tokenizer", NULL);
    char *err;
    cr_assert_eq(run("$CONV $D/hf --no-tokenizer -o $D/x.rad && $INFO --check $D/x.rad", &err), 0, "%s", err);
    free(err);
    /* one layer in the config beside two layers of tensors */
    write_hf("lie", NULL, FF, "LlamaForCausalLM");
    cr_assert_eq(run("cp tests/fixtures/hf/tiny-llama/tokenizer.json $D/lie/ && "
                     "sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 1/' $D/lie/config.json && "
                     "grep -q '\"num_hidden_layers\": 1' $D/lie/config.json", &err), 0, "%s", err);
    free(err);
    refused("$CONV $D/lie -o $D/l.rad", "lie: 9 tensors that no entry of the plugin's name map reads: "
            "'model.layers.1.input_layernorm.weight', 'model.layers.1.post_attention_layernorm.weight', "
            "'model.layers.1.self_attn.q_proj.weight', ... (does the metadata", "l.rad");
    refused("$CONV $D/lie --plan-only", "--drop-unclaimed converts without them", NULL);
    /* asked for: the one layer the config names, and nothing of the second */
    cr_assert_eq(run("$CONV $D/lie --drop-unclaimed -o $D/l.rad && $INFO --check $D/l.rad", &err), 0, "%s", err);
    free(err);
    char p[512];
    snprintf(p, sizeof p, "%s/l.rad", dir);
    RadModelFile r;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(p, &r, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(r.n_tensors, 3 + 9);
    cr_assert_null(rad_model_find(&r, "blk.1.attn_q.weight"));
    rad_model_free(&r);
}

/* --plan-only declares against radiance's step bounds (rad_build_ctx_for: 512 tokens, 16
 * sequences, n_ctx_train capped at 8192) and takes radiance's flags for them; it once declared
 * against 64 sequences and an uncapped context, a graph the server never builds. */
Test(convert, plan_only_declares_against_radiance_bounds) {
    char *err;
    cr_assert_eq(run("$CONV $NT tests/fixtures/tiny-llama-bf16 --plan-only > $D/p1 && "
                     "grep -qx 'plan: declared as radiance serves it: max_mixed_tok 512, max_seqs 16, context 512' $D/p1 && "
                     "$CONV $NT tests/fixtures/tiny-llama-bf16 --plan-only -v --max-seqs 3 --max-mixed-tok 32 --ctx 64 > $D/p2 && "
                     "grep -qx 'plan: declared as radiance serves it: max_mixed_tok 32, max_seqs 3, context 64' $D/p2 && "
                     "grep -q 'note: .*max_tok 32' $D/p2", &err), 0, "%s", err);
    free(err);
    cr_assert_eq(run("$CONV $NT tests/fixtures/tiny-llama-bf16 --plan-only --ctx 8", &err), 2, "--ctx 8 accepted");
    cr_assert(strstr(err, "--ctx 8: expected a whole number in [16,"), "%s", err);
    free(err);
    RadModelMeta m = {.struct_size = sizeof m, .n_ctx_train = 32768};
    RadBuildCtx bc = rad_build_ctx_for(&m, &(RadStepBounds){0});
    cr_assert(bc.max_tok == 512 && bc.max_mixed_tok == 512 && bc.max_seqs == 16 && bc.max_ctx == 8192 && bc.world_size == 1,
              "defaults: %u %u %u %u", bc.max_tok, bc.max_mixed_tok, bc.max_seqs, bc.max_ctx);
    bc = rad_build_ctx_for(&m, &(RadStepBounds){.max_ctx = 20000});
    cr_assert_eq(bc.max_ctx, 20000, "an explicit --ctx is not capped");
}
