/* Hugging Face folders: the tiny-llama fixture end to end, tokenizer.json variants, config.json
 * type errors, hostile JSON, and sharded weights whose index disagrees with the shards. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcommon/format/rad_hf.h"
#include "libcommon/io/rad_src.h"
#include "libcommon/format/rad_model.h"
#include "tests/test_util.h"

#define FIX "tests/fixtures/hf/tiny-llama"

static char tmpdir[64];

static void mk_tmp(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rad-hf-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
}
static void rm_tmp(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *dir, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}
static void write_str(const char *dir, const char *name, const char *s) {
    write_file(dir, name, s, strlen(s));
}
static void copy_fixture(const char *name, const char *as) {
    char path[512];
    snprintf(path, sizeof path, FIX "/%s", name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    write_file(tmpdir, as ? as : name, buf, n);
    free(buf);
}

/* Loads a folder through rad_src_open + rad_model_load_src. */
static int load_dir(const char *dir, RadModelFile *m, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    RadSrc s;
    int rc = rad_src_open(&s, dir, e);
    if (rc) return rc;
    rc = rad_model_load_src(&s, m, e);
    rad_src_free(&s);
    return rc;
}

static int64_t geti(const RadDict *kv, const char *key) {
    int64_t v = -12345;
    RadErr e = {0};
    cr_assert_eq(rad_dict_geti(kv, key, &v, &e), RAD_OK, "%s: %s", key, e.msg);
    return v;
}
static double getf(const RadDict *kv, const char *key) {
    double v = NAN;
    RadErr e = {0};
    cr_assert_eq(rad_dict_getf(kv, key, &v, &e), RAD_OK, "%s: %s", key, e.msg);
    return v;
}
static const char *gets_(const RadDict *kv, const char *key) {
    const char *v = NULL;
    RadErr e = {0};
    cr_assert_eq(rad_dict_gets(kv, key, &v, &e), RAD_OK, "%s: %s", key, e.msg);
    return v;
}
static const RadValue *arr(const RadDict *kv, const char *key, RadValType t) {
    const RadValue *v = rad_dict_get(kv, key);
    cr_assert_not_null(v, "%s", key);
    cr_assert_eq(v->type, RAD_VAL_ARRAY, "%s", key);
    cr_assert_eq(v->arr_type, t, "%s", key);
    return v;
}
static const char *str_at(const RadValue *v, uint64_t i) { return ((const RadStr *)v->v.arr)[i].p; }
static int32_t i32_at(const RadValue *v, uint64_t i) {
    int32_t x;
    memcpy(&x, (const uint8_t *)v->v.arr + 4 * i, 4);
    return x;
}

/* ---- the fixture ------------------------------------------------------------------------------ */

static void check_tiny_llama(const RadModelFile *m) {
    cr_assert_str_eq(m->format, "hf");
    cr_assert_str_eq(gets_(&m->meta, "model.arch_id"), "llama");
    cr_assert_str_eq(gets_(&m->meta, "model.name"), "radiance/tiny-llama");
    cr_assert_str_eq(gets_(&m->meta, "model.quant"), "");
    cr_assert_eq(geti(&m->meta, "model.n_layers"), 2);
    cr_assert_eq(geti(&m->meta, "model.n_embd"), 16);
    cr_assert_eq(geti(&m->meta, "model.n_head"), 4);
    cr_assert_eq(geti(&m->meta, "model.n_head_kv"), 2);
    cr_assert_eq(geti(&m->meta, "model.head_dim"), 4);
    cr_assert_eq(geti(&m->meta, "model.n_ff"), 32);
    cr_assert_eq(geti(&m->meta, "model.n_vocab"), 50);
    cr_assert_eq(geti(&m->meta, "model.n_ctx_train"), 256);
    cr_assert_eq(geti(&m->meta, "model.n_expert"), 0);
    cr_assert_eq(geti(&m->meta, "model.n_expert_used"), 0);
    cr_assert_eq(rad_dict_get(&m->meta, "model.n_layers")->type, RAD_VAL_U32);
    cr_assert_float_eq(getf(&m->meta, "model.rms_eps"), 1e-5, 1e-9);
    cr_assert_eq(rad_dict_get(&m->meta, "model.rms_eps")->type, RAD_VAL_F32);
    cr_assert_float_eq(getf(&m->meta, "model.rope_theta"), 100000.0, 0);
    cr_assert_eq(geti(&m->meta, "model.tie_embeddings"), 0);
    cr_assert_eq(rad_dict_get(&m->meta, "model.tie_embeddings")->type, RAD_VAL_BOOL);
    cr_assert_str_eq(gets_(&m->meta, "rope.scaling.type"), "llama3");
    cr_assert_float_eq(getf(&m->meta, "rope.scaling.factor"), 8.0, 0);
    cr_assert_float_eq(getf(&m->meta, "rope.scaling.low_freq_factor"), 1.0, 0);
    cr_assert_float_eq(getf(&m->meta, "rope.scaling.high_freq_factor"), 4.0, 0);
    cr_assert_eq(geti(&m->meta, "rope.scaling.original_context_length"), 64);
    /* generation_config.json */
    cr_assert_eq(geti(&m->meta, "generation.bos_token_id"), 1);
    cr_assert_eq(geti(&m->meta, "generation.do_sample"), 1);
    cr_assert_float_eq(getf(&m->meta, "generation.temperature"), 0.6, 1e-12);
    const RadValue *eos = arr(&m->meta, "generation.eos_token_id", RAD_VAL_I64);
    cr_assert_eq(eos->n, 2);
    cr_assert_eq(((const int64_t *)eos->v.arr)[0], 2);
    /* raw: flattened, prefixed by the file's stem */
    cr_assert_float_eq(getf(&m->raw, "config.rope_scaling.factor"), 8.0, 0);
    cr_assert_eq(geti(&m->raw, "config.hidden_size"), 16);
    cr_assert_str_eq(gets_(&m->raw, "config.hidden_act"), "silu");
    cr_assert_str_eq(str_at(arr(&m->raw, "config.architectures", RAD_VAL_STRING), 0),
                     "LlamaForCausalLM");
    cr_assert_float_eq(getf(&m->raw, "generation_config.top_p"), 0.9, 1e-12);
    /* tokenizer */
    cr_assert_str_eq(gets_(&m->tok, "tokenizer.model"), "gpt2");
    cr_assert_str_eq(gets_(&m->tok, "tokenizer.pre"), "smollm");
    const RadValue *toks = arr(&m->tok, "tokenizer.tokens", RAD_VAL_STRING);
    cr_assert_eq(toks->n, 50);
    cr_assert_str_eq(str_at(toks, 0), "<|endoftext|>");
    cr_assert_str_eq(str_at(toks, 3), "a");
    cr_assert_str_eq(str_at(toks, 29), "Ġ");
    cr_assert_str_eq(str_at(toks, 49), "Ġa");
    const RadValue *tt = arr(&m->tok, "tokenizer.token_type", RAD_VAL_I32);
    cr_assert_eq(tt->n, 50);
    for (int i = 0; i < 50; i++) cr_assert_eq(i32_at(tt, (uint64_t)i), i < 3 ? 3 : 1, "type %d", i);
    const RadValue *mg = arr(&m->tok, "tokenizer.merges", RAD_VAL_STRING);
    cr_assert_eq(mg->n, 15);
    cr_assert_str_eq(str_at(mg, 0), "h e");
    cr_assert_str_eq(str_at(mg, 8), "Ġworl d");
    cr_assert_eq(geti(&m->tok, "tokenizer.bos_id"), 1);
    cr_assert_eq(geti(&m->tok, "tokenizer.eos_id"), 2);
    cr_assert_eq(geti(&m->tok, "tokenizer.pad_id"), 2);
    cr_assert_eq(geti(&m->tok, "tokenizer.unk_id"), 0);
    cr_assert_eq(geti(&m->tok, "tokenizer.eot_id"), 2);
    cr_assert_eq(geti(&m->tok, "tokenizer.add_bos"), 0);
    cr_assert_eq(geti(&m->tok, "tokenizer.add_eos"), 0);
    cr_assert_eq(geti(&m->tok, "tokenizer.add_space_prefix"), 0);
    cr_assert_null(rad_dict_get(&m->tok, "tokenizer.pre_pattern"));
    cr_assert_null(rad_dict_get(&m->tok, "tokenizer.normalizer"));
    /* chat */
    cr_assert_str_eq(gets_(&m->chat, "chat.kind"), "chatml");
    cr_assert(strstr(gets_(&m->chat, "chat.template"), "{{'<|im_start|>' + message['role']"));
    cr_assert_str_eq(gets_(&m->chat, "chat.bos"), "<|im_start|>");
    cr_assert_str_eq(gets_(&m->chat, "chat.eos"), "<|im_end|>");
    /* weights: two shards */
    cr_assert_eq(m->n_ins, 2);
    cr_assert_eq(m->n_tensors, 21);
    const RadTensor *t = rad_model_find(m, "model.embed_tokens.weight");
    cr_assert_not_null(t);
    cr_assert_eq(t->src, 0);
    cr_assert_eq(t->enc, RAD_ENC_F16);
    cr_assert_eq(t->shape[0], 50);
    t = rad_model_find(m, "lm_head.weight");
    cr_assert_eq(t->src, 1);
    cr_assert(strstr(m->ins[1].name, "model-00002-of-00002.safetensors"), "%s", m->ins[1].name);
    t = rad_model_find(m, "model.layers.1.input_layernorm.weight");
    cr_assert_eq(t->src, 1);
    cr_assert_eq(t->enc, RAD_ENC_F32);
    for (uint64_t i = 0; i < m->n_tensors; i++) cr_assert_not_null(m->tensors[i].planes[0].data);
}

Test(hf, tiny_llama_folder) {
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_dir(FIX, &m, &e), RAD_OK, "%s", e.msg);
    check_tiny_llama(&m);
    cr_assert_str_eq(m.path, FIX);
    RadModelMeta mm;
    cr_assert_eq(rad_model_meta(&m, &mm, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(mm.arch_id, "llama");
    cr_assert_eq(mm.head_dim, 4);
    cr_assert_eq(mm.n_head_kv, 2);
    rad_model_free(&m);
}

Test(hf, tiny_llama_through_rad_model_open) {
    RadModelFile m;
    RadErr e = {0};
    cr_assert_eq(rad_model_open(FIX "/", &m, &e), RAD_OK, "%s", e.msg);
    check_tiny_llama(&m);
    rad_model_free(&m);
}

/* ---- tokenizer.json variants ------------------------------------------------------------------ */

static int read_tok(RadModelFile *m, const char *tok, const char *cfg, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    return rad_hf_read_tokenizer(m, "tokenizer.json", tok, tok ? strlen(tok) : 0,
                                 "tokenizer_config.json", cfg, cfg ? strlen(cfg) : 0, e);
}

static const char LLAMA_TOK[] =
    "{\"version\":\"1.0\",\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true},"
    "{\"id\":7,\"content\":\"<tool>\",\"special\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"▁\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"▁\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x41>\":3,\"<0x0A>\":4,\"▁\":5,\"▁a\":6,\"a\":8},"
    "\"merges\":[[\"▁\",\"a\"],[\"a\",\"a\"]]}}";

Test(hf, llama_byte_fallback_tokenizer) {
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_tok(&m, LLAMA_TOK, NULL, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.model"), "llama");
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.pre"), "default");
    const RadValue *toks = arr(&m.tok, "tokenizer.tokens", RAD_VAL_STRING);
    cr_assert_eq(toks->n, 9);
    cr_assert_str_eq(str_at(toks, 7), "<tool>");
    const RadValue *tt = arr(&m.tok, "tokenizer.token_type", RAD_VAL_I32);
    static const int32_t want[9] = {2, 3, 3, 6, 6, 1, 1, 4, 1};
    for (int i = 0; i < 9; i++) cr_assert_eq(i32_at(tt, (uint64_t)i), want[i], "type %d", i);
    const RadValue *mg = arr(&m.tok, "tokenizer.merges", RAD_VAL_STRING);
    cr_assert_eq(mg->n, 2);
    cr_assert_str_eq(str_at(mg, 0), "▁ a");
    cr_assert_eq(geti(&m.tok, "tokenizer.unk_id"), 0);
    cr_assert_eq(geti(&m.tok, "tokenizer.add_bos"), 1);
    cr_assert_eq(geti(&m.tok, "tokenizer.bos_id"), 1);
    cr_assert_eq(geti(&m.tok, "tokenizer.add_space_prefix"), 1);
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.normalizer"), "Sequence");
    cr_assert_eq(m.chat.n, 0);
    rad_model_free(&m);

    /* tokenizer_config.json overrides what the post-processor implies */
    const char *cfg = "{\"add_bos_token\":false,\"add_eos_token\":true,"
                      "\"bos_token\":{\"__type\":\"AddedToken\",\"content\":\"<s>\"},"
                      "\"eos_token\":\"</s>\",\"unk_token\":null,"
                      "\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"tools\"},"
                      "{\"name\":\"default\",\"template\":\"{{ bos_token }}[INST] {{ m }} [/INST]\"}]}";
    cr_assert_eq(read_tok(&m, LLAMA_TOK, cfg, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(geti(&m.tok, "tokenizer.add_bos"), 0);
    cr_assert_eq(geti(&m.tok, "tokenizer.add_eos"), 1);
    cr_assert_eq(geti(&m.tok, "tokenizer.eos_id"), 2);
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "llama2");
    cr_assert_str_eq(gets_(&m.chat, "chat.template"), "{{ bos_token }}[INST] {{ m }} [/INST]");
    cr_assert_str_eq(gets_(&m.chat, "chat.bos"), "<s>");
    cr_assert_str_eq(gets_(&m.chat, "chat.eos"), "</s>");
    rad_model_free(&m);
}

Test(hf, split_regex_inside_a_sequence) {
    const char *tok =
        "{\"added_tokens\":[{\"id\":3,\"content\":\"<|eot_id|>\",\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}"
        "\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
        "\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}";
    const char *cfg = "{\"chat_template\":\"{{ '<|start_header_id|>' }}\",\"eos_token\":\"<|eot_id|>\"}";
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_tok(&m, tok, cfg, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.model"), "gpt2");
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.pre"), "llama-bpe");
    cr_assert(strncmp(gets_(&m.tok, "tokenizer.pre_pattern"), "(?i:'s|'t|", 10) == 0);
    cr_assert(strstr(gets_(&m.tok, "tokenizer.pre_pattern"), "\\p{N}{1,3}"));
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "llama3");
    cr_assert_eq(geti(&m.tok, "tokenizer.eos_id"), 3);
    cr_assert_eq(geti(&m.tok, "tokenizer.eot_id"), 3);
    rad_model_free(&m);
}

Test(hf, unigram_wordpiece_and_unsupported) {
    RadModelFile m;
    RadErr e;
    const char *uni = "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,"
                      "\"vocab\":[[\"<unk>\",0.0],[\"▁a\",-1.5],[\"b\",-2]]}}";
    cr_assert_eq(read_tok(&m, uni, "{\"chat_template\":\"plain\"}", &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.model"), "t5");
    const RadValue *sc = arr(&m.tok, "tokenizer.scores", RAD_VAL_F32);
    cr_assert_eq(sc->n, 3);
    float f;
    memcpy(&f, (const uint8_t *)sc->v.arr + 4, 4);
    cr_assert_float_eq(f, -1.5f, 0);
    cr_assert_eq(i32_at(arr(&m.tok, "tokenizer.token_type", RAD_VAL_I32), 0), 2);
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "unknown");
    rad_model_free(&m);

    const char *wp = "{\"added_tokens\":[{\"id\":0,\"content\":\"[CLS]\",\"special\":true}],"
                     "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
                     "\"vocab\":{\"[CLS]\":0,\"[UNK]\":1,\"hello\":2}}}";
    cr_assert_eq(read_tok(&m, wp, NULL, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.tok, "tokenizer.model"), "bert");
    cr_assert_eq(geti(&m.tok, "tokenizer.unk_id"), 1);
    cr_assert_null(rad_dict_get(&m.tok, "tokenizer.merges"));
    rad_model_free(&m);

    cr_assert_eq(read_tok(&m, "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{}}}", NULL, &e),
                 RAD_E_UNSUPPORTED);
    cr_assert(strstr(e.msg, "tokenizer.json: tokenizer model type 'WordLevel'"), "%s", e.msg);
    rad_model_free(&m);
}

Test(hf, vocabulary_ids) {
    RadModelFile m;
    RadErr e;
    /* holes become [PADn] tokens of type unused */
    cr_assert_eq(read_tok(&m, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":4},\"merges\":[]}}",
                          NULL, &e), RAD_OK, "%s", e.msg);
    const RadValue *toks = arr(&m.tok, "tokenizer.tokens", RAD_VAL_STRING);
    cr_assert_eq(toks->n, 5);
    cr_assert_str_eq(str_at(toks, 2), "[PAD2]");
    cr_assert_eq(i32_at(arr(&m.tok, "tokenizer.token_type", RAD_VAL_I32), 2), 5);
    cr_assert_eq(arr(&m.tok, "tokenizer.merges", RAD_VAL_STRING)->n, 0);
    rad_model_free(&m);

    static const struct {
        const char *tok, *needle;
    } bad[] = {
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":16000000},\"merges\":[]}}", "sparse"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":16777216},\"merges\":[]}}",
         "field 'model.vocab['a']': 16777216 is out of range"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", "out of range"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}}",
         "field 'model.vocab['a']': expected integer, got string"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
         "id 0 is used by both"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}",
         "field 'model.vocab': expected object, got array"},
        {"{\"model\":{\"type\":\"BPE\",\"merges\":[]}}", "field 'model.vocab' is missing"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", "vocabulary is empty"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}",
         "field 'model.merges[0]'"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", "got integer"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":{}}}",
         "field 'model.merges': expected array"},
        {"{\"added_tokens\":[{\"id\":\"1\",\"content\":\"x\"}],\"model\":{\"type\":\"BPE\",\"vocab\":"
         "{\"a\":0},\"merges\":[]}}", "field 'added_tokens[0].id': expected integer"},
        {"{\"added_tokens\":[{\"id\":1}],\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
         "field 'added_tokens[0].content' is missing"},
        {"{\"added_tokens\":[{\"id\":1,\"content\":\"x\",\"special\":\"yes\"}],\"model\":{\"type\":"
         "\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "expected boolean, got string"},
        {"{\"added_tokens\":{},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
         "field 'added_tokens': expected array"},
        {"{\"model\":[]}", "field 'model': expected object, got array"},
        {"{\"version\":\"1.0\"}", "field 'model' is missing"},
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\"]]}}", "expected [string, number]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = read_tok(&m, bad[i].tok, NULL, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "#%zu: rc %d (%s)", i, rc, e.msg);
        cr_assert(strstr(e.msg, bad[i].needle), "#%zu: '%s' lacks '%s'", i, e.msg, bad[i].needle);
        cr_assert(strncmp(e.msg, "tokenizer.json: ", 16) == 0, "#%zu: '%s'", i, e.msg);
        rad_model_free(&m);
    }
}

Test(hf, tokenizer_config_errors) {
    RadModelFile m;
    RadErr e;
    static const struct {
        const char *cfg, *needle;
    } bad[] = {
        {"{\"add_bos_token\":1}", "field 'add_bos_token': expected boolean, got integer"},
        {"{\"bos_token\":3}", "field 'bos_token': expected string, got integer"},
        {"{\"eos_token\":{\"text\":\"x\"}}", "field 'eos_token.content' is missing"},
        {"{\"chat_template\":7}", "field 'chat_template': expected string, got integer"},
        {"{\"chat_template\":[{\"name\":\"default\"}]}", "field 'chat_template[0]'"},
        {"[]", "expected a JSON object, got array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = read_tok(&m, LLAMA_TOK, bad[i].cfg, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "#%zu: rc %d (%s)", i, rc, e.msg);
        cr_assert(strstr(e.msg, bad[i].needle), "#%zu: '%s' lacks '%s'", i, e.msg, bad[i].needle);
        cr_assert(strncmp(e.msg, "tokenizer_config.json: ", 23) == 0, "#%zu: '%s'", i, e.msg);
        rad_model_free(&m);
    }
    /* without tokenizer.json only the chat table is filled */
    cr_assert_eq(read_tok(&m, NULL, "{\"add_bos_token\":true,\"chat_template\":\"x<|im_start|>\","
                                    "\"eos_token\":\"<|im_end|>\"}", &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.tok.n, 0);
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "chatml");
    cr_assert_str_eq(gets_(&m.chat, "chat.eos"), "<|im_end|>");
    rad_model_free(&m);
}

/* ---- config.json -------------------------------------------------------------------------------- */

static int read_cfg(RadModelFile *m, const char *json, RadErr *e) {
    memset(m, 0, sizeof *m);
    rad_err_clear(e);
    return rad_hf_read_config(m, "config.json", json, strlen(json), "folder", e);
}

Test(hf, config_defaults_and_aliases) {
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"gpt2\",\"n_layer\":3,\"n_embd\":64,\"n_head\":8,"
                              "\"n_positions\":128,\"layer_norm_epsilon\":1e-5,\"head_dim\":null,"
                              "\"num_key_value_heads\":null,\"rope_scaling\":null,"
                              "\"_name_or_path\":\"\",\"num_local_experts\":4,"
                              "\"nested\":{\"a\":{\"b\":[1,2.5]},\"c\":[{\"x\":1}],\"d\":[]}}", &e),
                 RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.meta, "model.name"), "folder");
    cr_assert_eq(geti(&m.meta, "model.n_layers"), 3);
    cr_assert_eq(geti(&m.meta, "model.n_head_kv"), 8);
    cr_assert_eq(geti(&m.meta, "model.head_dim"), 8);
    cr_assert_eq(geti(&m.meta, "model.n_ctx_train"), 128);
    cr_assert_eq(geti(&m.meta, "model.n_expert"), 4);
    cr_assert_float_eq(getf(&m.meta, "model.rope_theta"), 10000.0, 0);
    cr_assert_null(rad_dict_get(&m.meta, "model.n_ff"));
    cr_assert_null(rad_dict_get(&m.meta, "model.tie_embeddings"));
    cr_assert_null(rad_dict_get(&m.meta, "rope.scaling.type"));
    const RadValue *b = arr(&m.raw, "config.nested.a.b", RAD_VAL_F64);
    cr_assert_eq(b->n, 2);
    cr_assert_float_eq(((const double *)b->v.arr)[1], 2.5, 0);
    cr_assert_str_eq(gets_(&m.raw, "config.nested.c"), "[{\"x\":1}]");
    cr_assert_eq(arr(&m.raw, "config.nested.d", RAD_VAL_I64)->n, 0);
    cr_assert_null(rad_dict_get(&m.raw, "config.head_dim"));
    rad_model_free(&m);

    /* transformers 5 keeps rope settings in rope_parameters */
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"qwen3\",\"rope_parameters\":{\"rope_theta\":1e6,"
                              "\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":"
                              "32768}}", &e), RAD_OK, "%s", e.msg);
    cr_assert_float_eq(getf(&m.meta, "model.rope_theta"), 1e6, 0);
    cr_assert_str_eq(gets_(&m.meta, "rope.scaling.type"), "yarn");
    cr_assert_float_eq(getf(&m.meta, "rope.scaling.factor"), 4.0, 0);
    cr_assert_eq(geti(&m.meta, "rope.scaling.original_context_length"), 32768);
    rad_model_free(&m);
}

/* Gemma 3's local/global layers: transformers 4's keys (google/gemma-3-270m's config.json:
 * rope_theta, rope_local_base_freq, _sliding_window_pattern, layer_types) and transformers 5's
 * (rope_parameters by layer type). layer_types wins over the period; one naming a kind of layer
 * other than these two is left to the raw table. */
Test(hf, config_gemma3_local_layers) {
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":4,\"head_dim\":256,"
                              "\"query_pre_attn_scalar\":256,\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0,"
                              "\"rope_scaling\":null,\"sliding_window\":512,\"_sliding_window_pattern\":6,"
                              "\"layer_types\":[\"sliding_attention\",\"sliding_attention\",\"full_attention\","
                              "\"sliding_attention\"]}", &e), RAD_OK, "%s", e.msg);
    cr_assert_float_eq(getf(&m.meta, "model.rope_theta"), 1e6, 0);
    cr_assert_float_eq(getf(&m.meta, "rope.local_freq_base"), 1e4, 0);
    cr_assert_float_eq(getf(&m.meta, "attention.query_pre_attn_scalar"), 256, 0);
    cr_assert_eq(geti(&m.meta, "attention.sliding_window"), 512);
    const RadValue *v = arr(&m.meta, "attention.sliding_window_pattern", RAD_VAL_BOOL);
    cr_assert_eq(v->n, 4);
    cr_assert(memcmp(v->v.arr, "\1\1\0\1", 4) == 0, "true where the layer slides");
    cr_assert_null(rad_dict_get(&m.meta, "rope.scaling.type"));
    rad_model_free(&m);

    /* transformers 5: the full layers' rope is the model's (here with 4B's linear scaling) */
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"gemma3_text\",\"sliding_window_pattern\":2,"
                              "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":8.0,"
                              "\"rope_theta\":1000000.0},\"sliding_attention\":{\"rope_type\":\"default\","
                              "\"rope_theta\":500.0}}}", &e), RAD_OK, "%s", e.msg);
    cr_assert_float_eq(getf(&m.meta, "model.rope_theta"), 1e6, 0);
    cr_assert_str_eq(gets_(&m.meta, "rope.scaling.type"), "linear");
    cr_assert_float_eq(getf(&m.meta, "rope.scaling.factor"), 8.0, 0);
    cr_assert_float_eq(getf(&m.meta, "rope.local_freq_base"), 500.0, 0);
    cr_assert_null(rad_dict_get(&m.meta, "rope.local_scaling.type"));
    cr_assert_eq(geti(&m.meta, "attention.sliding_window_pattern"), 2);
    rad_model_free(&m);

    /* a scaled local rope is recorded (the plugin refuses it); unknown layer kinds are not mapped */
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"gemma3_text\",\"rope_parameters\":{\"sliding_attention\":"
                              "{\"rope_type\":\"linear\",\"factor\":2.0,\"rope_theta\":10000.0}},"
                              "\"layer_types\":[\"linear_attention\",\"full_attention\"]}", &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.meta, "rope.local_scaling.type"), "linear");
    cr_assert_float_eq(getf(&m.meta, "model.rope_theta"), 1e4, 0);
    cr_assert_null(rad_dict_get(&m.meta, "attention.sliding_window_pattern"));
    rad_model_free(&m);

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"model_type\":\"gemma3_text\",\"layer_types\":[\"full_attention\",3]}",
         "config.json: field 'layer_types[1]': expected string, got integer"},
        {"{\"model_type\":\"gemma3_text\",\"layer_types\":\"full_attention\"}",
         "config.json: field 'layer_types': expected array, got string"},
        {"{\"model_type\":\"gemma3_text\",\"_sliding_window_pattern\":0}",
         "config.json: field '_sliding_window_pattern': 0 is out of range"},
        {"{\"model_type\":\"gemma3_text\",\"query_pre_attn_scalar\":-1}",
         "config.json: field 'query_pre_attn_scalar': -1 is not a finite number"},
        {"{\"model_type\":\"gemma3_text\",\"rope_parameters\":{\"full_attention\":5}}",
         "config.json: field 'rope_parameters.full_attention': expected object, got integer"},
        {"{\"model_type\":\"gemma3_text\",\"rope_parameters\":{\"sliding_attention\":{\"rope_theta\":\"1\"}}}",
         "config.json: field 'rope_parameters.sliding_attention.rope_theta': expected number, got string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = read_cfg(&m, bad[i].json, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "#%zu: rc %d (%s)", i, rc, e.msg);
        cr_assert(strstr(e.msg, bad[i].msg), "#%zu: '%s' lacks '%s'", i, e.msg, bad[i].msg);
        rad_model_free(&m);
    }
}

Test(hf, config_wrong_types) {
    static const struct {
        const char *json, *msg;
        int code;
    } bad[] = {
        {"{\"model_type\":\"llama\",\"hidden_size\":\"16\"}",
         "config.json: field 'hidden_size': expected integer, got string", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"hidden_size\":16.0}",
         "config.json: field 'hidden_size': expected integer, got number", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"num_hidden_layers\":-2}",
         "config.json: field 'num_hidden_layers': -2 is out of range", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"vocab_size\":4294967296}",
         "config.json: field 'vocab_size': 4294967296 is out of range", RAD_E_FORMAT},
        {"{\"hidden_size\":16}", "config.json: field 'model_type' is missing", RAD_E_FORMAT},
        {"{\"model_type\":[\"llama\"]}", "config.json: field 'model_type': expected string, got array",
         RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"_name_or_path\":5}",
         "config.json: field '_name_or_path': expected string, got integer", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rms_norm_eps\":\"1e-5\"}",
         "config.json: field 'rms_norm_eps': expected number, got string", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rope_theta\":true}",
         "config.json: field 'rope_theta': expected number, got boolean", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"tie_word_embeddings\":\"no\"}",
         "config.json: field 'tie_word_embeddings': expected boolean, got string", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"factor\":\"8\"}}",
         "config.json: field 'rope_scaling.factor': expected number, got string", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"type\":1}}",
         "config.json: field 'rope_scaling.type': expected string, got integer", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"original_max_position_embeddings\":1.5}}",
         "config.json: field 'rope_scaling.original_max_position_embeddings': expected integer",
         RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"rope_scaling\":8}",
         "config.json: field 'rope_scaling': expected object, got integer", RAD_E_FORMAT},
        {"[1]", "config.json: expected a JSON object, got array", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",\"a\":1,\"a\":2}", "config.json: invalid JSON", RAD_E_FORMAT},
        {"{\"model_type\":\"llama\",}", "config.json: invalid JSON at line 1", RAD_E_FORMAT},
        {"{\"model_type\":\"ll\xe9\"}", "config.json: invalid JSON", RAD_E_FORMAT},
        {"", "config.json: empty file", RAD_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        RadModelFile m;
        RadErr e;
        int rc = read_cfg(&m, bad[i].json, &e);
        cr_assert_eq(rc, bad[i].code, "#%zu: rc %d (%s)", i, rc, e.msg);
        cr_assert(strstr(e.msg, bad[i].msg), "#%zu: '%s' lacks '%s'", i, e.msg, bad[i].msg);
        rad_model_free(&m);
    }
}

Test(hf, deeply_nested_json_fails_cleanly) {
    size_t depth = 100000;
    char *j = malloc(2 * depth + 32);
    size_t o = (size_t)sprintf(j, "{\"model_type\":\"x\",\"a\":");
    memset(j + o, '[', depth);
    memset(j + o + depth, ']', depth);
    strcpy(j + o + 2 * depth, "}");
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_cfg(&m, j, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "config.json: invalid JSON") && strstr(e.msg, "depth"), "%s", e.msg);
    rad_model_free(&m);
    /* the same as tokenizer.json and generation_config.json */
    cr_assert_eq(read_tok(&m, j, NULL, &e), RAD_E_FORMAT);
    cr_assert(strstr(e.msg, "depth"), "%s", e.msg);
    rad_model_free(&m);
    memset(&m, 0, sizeof m);
    rad_err_clear(&e);
    cr_assert_eq(rad_hf_read_generation(&m, "generation_config.json", j, strlen(j), &e), RAD_E_FORMAT);
    rad_model_free(&m);
    free(j);
}

Test(hf, huge_json_is_refused, .init = mk_tmp, .fini = rm_tmp) {
    copy_fixture("config.json", NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, (off_t)RAD_HF_MAX_JSON + 1), 0); /* sparse: no disk used */
    close(fd);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_dir(tmpdir, &m, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "tokenizer.json: 67108865 bytes exceeds the limit"), "%s", e.msg);
    rad_model_free(&m);
    /* and straight into the parser */
    char *big = malloc(RAD_HF_MAX_JSON + 1);
    memset(big, ' ', RAD_HF_MAX_JSON + 1);
    memset(&m, 0, sizeof m);
    rad_err_clear(&e);
    cr_assert_eq(rad_hf_read_config(&m, "config.json", big, RAD_HF_MAX_JSON + 1, NULL, &e), RAD_E_LIMIT);
    cr_assert(strstr(e.msg, "64 MiB"), "%s", e.msg);
    rad_model_free(&m);
    free(big);
}

/* ---- weights ------------------------------------------------------------------------------------ */

static void copy_all_but_index(void) {
    static const char *names[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                  "generation_config.json", "model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) copy_fixture(names[i], NULL);
}

static void expect_load_fail(int code, const char *needle) {
    RadModelFile m;
    RadErr e;
    int rc = load_dir(tmpdir, &m, &e);
    cr_assert_eq(rc, code, "rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
    rad_model_free(&m);
}

Test(hf, index_names_a_missing_shard, .init = mk_tmp, .fini = rm_tmp) {
    copy_all_but_index();
    write_str(tmpdir, "model.safetensors.index.json",
              "{\"metadata\":{},\"weight_map\":{\"lm_head.weight\":\"model-00003-of-00003.safetensors\","
              "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_load_fail(RAD_E_NOTFOUND, "model.safetensors.index.json: shard "
                                     "'model-00003-of-00003.safetensors' (holding tensor 'lm_head.weight')");
}

Test(hf, index_lists_a_tensor_its_shard_lacks, .init = mk_tmp, .fini = rm_tmp) {
    copy_all_but_index();
    write_str(tmpdir, "model.safetensors.index.json",
              "{\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
              "\"ghost.weight\":\"model-00001-of-00002.safetensors\"}}");
    expect_load_fail(RAD_E_FORMAT, "tensor 'ghost.weight' is listed in shard "
                                   "'model-00001-of-00002.safetensors' but absent from it");
    write_str(tmpdir, "model.safetensors.index.json",
              "{\"weight_map\":{\"lm_head.weight\":\"model-00001-of-00002.safetensors\","
              "\"model.norm.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_load_fail(RAD_E_FORMAT, "tensor 'lm_head.weight' is listed in shard "
                                   "'model-00001-of-00002.safetensors' but absent");
}

Test(hf, tensor_in_two_shards, .init = mk_tmp, .fini = rm_tmp) {
    copy_all_but_index();
    copy_fixture("model-00001-of-00002.safetensors", "model-extra.safetensors");
    write_str(tmpdir, "model.safetensors.index.json",
              "{\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
              "\"model.embed_tokens.weight\":\"model-00001-of-00002.safetensors\","
              "\"model.layers.0.mlp.up_proj.weight\":\"model-extra.safetensors\"}}");
    expect_load_fail(RAD_E_FORMAT, "is in two shards");
}

Test(hf, bad_index_files, .init = mk_tmp, .fini = rm_tmp) {
    copy_all_but_index();
    write_str(tmpdir, "model.safetensors.index.json", "{\"weight_map\":[]}");
    expect_load_fail(RAD_E_FORMAT, "model.safetensors.index.json: field 'weight_map': expected object");
    write_str(tmpdir, "model.safetensors.index.json", "{\"metadata\":{}}");
    expect_load_fail(RAD_E_FORMAT, "field 'weight_map' is missing");
    write_str(tmpdir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":1}}");
    expect_load_fail(RAD_E_FORMAT, "field 'weight_map.a': expected string, got integer");
    write_str(tmpdir, "model.safetensors.index.json", "{\"weight_map\":{\"a\":\"../x.safetensors\"}}");
    expect_load_fail(RAD_E_NOTFOUND, "shard '../x.safetensors'");
    /* a broken shard is reported with its own name */
    write_str(tmpdir, "model.safetensors.index.json",
              "{\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    write_file(tmpdir, "model-00002-of-00002.safetensors", "\x02\0\0\0\0\0\0\0{", 9);
    expect_load_fail(RAD_E_FORMAT, "model-00002-of-00002.safetensors: header length 2 runs past");
}

Test(hf, single_file_tokenizer_only_and_pickles, .init = mk_tmp, .fini = rm_tmp) {
    /* config without tie_word_embeddings: tied when there is no lm_head.weight */
    write_str(tmpdir, "config.json", "{\"model_type\":\"llama\",\"hidden_size\":16}");
    copy_fixture("model-00001-of-00002.safetensors", "model.safetensors");
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_dir(tmpdir, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 10);
    cr_assert_eq(geti(&m.meta, "model.tie_embeddings"), 1);
    cr_assert_eq(m.tok.n, 0);
    cr_assert_eq(m.chat.n, 0);
    const char *name = gets_(&m.meta, "model.name");
    cr_assert(strncmp(name, "rad-hf-", 7) == 0, "the folder names the model: %s", name);
    rad_model_free(&m);

    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    cr_assert_eq(unlink(path), 0);
    copy_fixture("tokenizer.json", NULL);
    write_str(tmpdir, "chat_template.jinja", "{{ '<|start_header_id|>' }}");
    cr_assert_eq(load_dir(tmpdir, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(m.n_tensors, 0);
    cr_assert_eq(arr(&m.tok, "tokenizer.tokens", RAD_VAL_STRING)->n, 50);
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "llama3");
    cr_assert_null(rad_dict_get(&m.tok, "tokenizer.eot_id")); /* no <|eot_id|> in this vocabulary */
    cr_assert_null(rad_dict_get(&m.meta, "model.tie_embeddings"));
    rad_model_free(&m);
    write_str(tmpdir, "chat_template.jinja", "{{ '<|im_start|>' }}");
    cr_assert_eq(load_dir(tmpdir, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_str_eq(gets_(&m.chat, "chat.kind"), "chatml");
    cr_assert_eq(geti(&m.tok, "tokenizer.eot_id"), 2);
    rad_model_free(&m);

    write_str(tmpdir, "pytorch_model.bin", "PK");
    expect_load_fail(RAD_E_UNSUPPORTED, "pytorch_model.bin");
}

Test(hf, bos_eos_from_config_json, .init = mk_tmp, .fini = rm_tmp) {
    write_str(tmpdir, "config.json", "{\"model_type\":\"llama\",\"bos_token_id\":1,\"eos_token_id\":2}");
    write_str(tmpdir, "tokenizer.json", LLAMA_TOK);
    RadModelFile m;
    RadErr e;
    cr_assert_eq(load_dir(tmpdir, &m, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(geti(&m.tok, "tokenizer.bos_id"), 1);
    cr_assert_eq(geti(&m.tok, "tokenizer.eos_id"), 2);
    rad_model_free(&m);
}

Test(hf, config_errors_name_the_file_in_the_folder, .init = mk_tmp, .fini = rm_tmp) {
    write_str(tmpdir, "config.json", "{\"model_type\":\"llama\",\"hidden_size\":\"16\"}");
    expect_load_fail(RAD_E_FORMAT, "/config.json: field 'hidden_size': expected integer, got string");
    write_str(tmpdir, "config.json", "{\"model_type\":\"llama\"}");
    write_str(tmpdir, "generation_config.json", "{\"a\":");
    expect_load_fail(RAD_E_FORMAT, "/generation_config.json: invalid JSON");
}

/* ---- hostile configs and folders (issue 11, classes 4, 5 and 9) ----------------------------- */

/* A config.json with 100,000 keys flattens into the raw table (hashed: a scan per key made
 * this quadratic); about 0.2 s here. */
Test(hf, config_with_many_keys) {
    enum { N = 100000 };
    size_t cap = (size_t)N * 32 + 128, o = 0;
    char *j = malloc(cap);
    o += (size_t)snprintf(j + o, cap - o, "{\"model_type\":\"llama\",\"num_hidden_layers\":2");
    for (int i = 0; i < N; i++) o += (size_t)snprintf(j + o, cap - o, ",\"x_%d\":%d", i, i);
    o += (size_t)snprintf(j + o, cap - o, "}");
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_cfg(&m, j, &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(geti(&m.raw, "config.x_99999"), 99999);
    cr_assert_eq(geti(&m.raw, "config.x_0"), 0);
    cr_assert_eq(geti(&m.meta, "model.n_layers"), 2);
    cr_assert_eq(m.raw.n, (uint64_t)N + 2);
    rad_model_free(&m);
    free(j);
}

/* Numbers the model uses as f32 must be finite there and in range: 1e300 is valid JSON but
 * would be inf. */
Test(hf, config_numbers_out_of_range) {
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"model_type\":\"llama\",\"rope_theta\":1e300}", "field 'rope_theta': 1e+300 is not a finite number"},
        {"{\"model_type\":\"llama\",\"rope_theta\":-5}", "field 'rope_theta': -5 is not a finite number"},
        {"{\"model_type\":\"llama\",\"rope_theta\":0}", "field 'rope_theta': 0 is not"},
        {"{\"model_type\":\"llama\",\"rms_norm_eps\":0}", "field 'rms_norm_eps': 0 is not a finite number in (0, 1]"},
        {"{\"model_type\":\"llama\",\"rms_norm_eps\":1e-60}", "field 'rms_norm_eps': 1e-60 is not"},
        {"{\"model_type\":\"llama\",\"rope_parameters\":{\"rope_theta\":1e40}}", "field 'rope_parameters.rope_theta'"},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":1e39}}", "field 'rope_scaling.factor'"},
        {"{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":-8}}", "field 'rope_scaling.factor'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        RadModelFile m;
        RadErr e;
        int rc = read_cfg(&m, cases[i].json, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "%s: rc %d (%s)", cases[i].json, rc, e.msg);
        cr_assert(strstr(e.msg, "config.json") && strstr(e.msg, cases[i].want), "'%s' lacks '%s'", e.msg, cases[i].want);
        rad_model_free(&m);
    }
    RadModelFile m;
    RadErr e;
    cr_assert_eq(read_cfg(&m, "{\"model_type\":\"llama\",\"rope_theta\":500000.0,\"rms_norm_eps\":1e-5}", &e), RAD_OK, "%s", e.msg);
    cr_assert_eq(getf(&m.meta, "model.rope_theta"), 500000.0);
    rad_model_free(&m);
}

/* A FIFO inside the folder is refused by name at once, never opened for a blocking read (the
 * test has a deadline: a hang fails it). */
Test(hf, fifo_member_is_refused, .init = mk_tmp, .fini = rm_tmp) {
    test_deadline(30);
    copy_all_but_index();
    copy_fixture("model.safetensors.index.json", NULL);
    static const char *members[] = {"config.json", "tokenizer.json", "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tmpdir, members[i]);
        cr_assert_eq(unlink(p), 0);
        cr_assert_eq(mkfifo(p, 0644), 0);
        RadModelFile m;
        RadErr e;
        int rc = load_dir(tmpdir, &m, &e);
        cr_assert_eq(rc, RAD_E_IO, "%s: rc %d (%s)", members[i], rc, e.msg);
        cr_assert(strstr(e.msg, members[i]) && strstr(e.msg, "not a regular file"), "%s", e.msg);
        rad_model_free(&m);
        cr_assert_eq(unlink(p), 0);
        copy_fixture(members[i], NULL);
    }
}

/* A Unigram unk_id that is not an id of the vocabulary is named, not ignored. */
Test(hf, unigram_unk_id_out_of_range) {
    static const char *bad[] = {"5", "-1", "\"0\"", "1.5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char tok[256];
        snprintf(tok, sizeof tok, "{\"model\":{\"type\":\"Unigram\",\"unk_id\":%s,"
                 "\"vocab\":[[\"<unk>\",0.0],[\"a\",-1.5],[\"b\",-2]]}}", bad[i]);
        RadModelFile m;
        RadErr e;
        int rc = read_tok(&m, tok, NULL, &e);
        cr_assert_eq(rc, RAD_E_FORMAT, "unk_id %s: rc %d (%s)", bad[i], rc, e.msg);
        cr_assert(strstr(e.msg, "tokenizer.json: field 'model.unk_id'"), "%s", e.msg);
        rad_model_free(&m);
    }
}
