/* rad_chat_formats.h — chat formats as data (RadChatFormat), header-only, and the choice of
 * one from a model's metadata. Families share them: ChatML (SmolLM2, Qwen2.5, Qwen3), Llama 3 headers,
 * Llama 2 [INST], Zephyr (TinyLlama-Chat).
 *
 * Choice (rad_chat_format_pick): the kv table's "chat.kind" when it names a known kind; else
 * the markup found in "chat.template"; else the special tokens the tokenizer keys and
 * "chat.bos"/"chat.eos" carry; else the caller's fallback (Llama: Llama 2 at a 32000 vocab). */
#ifndef RAD_CHAT_FORMATS_H
#define RAD_CHAT_FORMATS_H

#include <arch/rad_arch.h>

static const char *const rad_chat_stop_chatml[] = {"<|im_end|>", "<|endoftext|>", NULL};
static const char *const rad_chat_stop_llama3[] = {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", NULL};
static const char *const rad_chat_stop_eos_s[] = {"</s>", NULL};

/* ChatML, as SmolLM2's template writes it: "<|im_start|>role\ncontent<|im_end|>\n"; the
 * generation prompt is "<|im_start|>assistant\n". No BOS. */
#define RAD_CHAT_CHATML_FIELDS                                                                     \
    .struct_size = sizeof(RadChatFormat), .kind = "chatml", .bos = "",                            \
    .system_start = "<|im_start|>system\n", .system_end = "<|im_end|>\n",                         \
    .user_start = "<|im_start|>user\n", .user_end = "<|im_end|>\n",                               \
    .assistant_start = "<|im_start|>assistant\n", .assistant_end = "<|im_end|>\n",                \
    .stop = rad_chat_stop_chatml
static const RadChatFormat rad_chat_chatml = {RAD_CHAT_CHATML_FIELDS, .default_system = NULL};
/* SmolLM2's template adds this system turn when a chat opens without one. */
static const RadChatFormat rad_chat_chatml_smollm = {
    RAD_CHAT_CHATML_FIELDS,
    .default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"};

/* Tools as Qwen2.5's and Qwen3's templates render them (abi/rad_arch.h, ABI 1.7): the tool
 * signatures as JSON lines inside <tools></tools> in the system turn with the template's
 * instructions, a reply's calls as <tool_call> blocks after its content, and a run of tool
 * results as one user turn of <tool_response> blocks. TOOLS_END is the instructions' tail,
 * which Qwen2.5-Coder-1.5B-Instruct's template writes with its braces doubled. */
#define RAD_CHAT_QWEN_TOOLS_END(LB, RB)                                                                          \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "       \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n" LB "\"name\": <function-name>, \"arguments\": "          \
    "<args-json-object>" RB "\n</tool_call>"
#define RAD_CHAT_QWEN_TOOLS_FIELDS(LB, RB)                                                                       \
    .tool_call_start = "<tool_call>", .tool_call_end = "</tool_call>", .tools_system_sep = "\n\n",              \
    .tools_start = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "   \
                   "provided with function signatures within <tools></tools> XML tags:\n<tools>",               \
    .tools_sep = "\n", .tools_end = RAD_CHAT_QWEN_TOOLS_END(LB, RB), .tool_calls_sep = "\n",                    \
    .tool_call_open = "<tool_call>\n{\"name\": \"", .tool_call_mid = "\", \"arguments\": ",                     \
    .tool_call_close = "}\n</tool_call>", .tool_turn_start = "<|im_start|>user",                               \
    .tool_result_start = "\n<tool_response>\n", .tool_result_end = "\n</tool_response>"

/* Qwen2.5's template: ChatML whose chat opens with this system turn when it has none, with
 * Qwen's tools. */
#define RAD_CHAT_QWEN_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
static const RadChatFormat rad_chat_chatml_qwen = {
    RAD_CHAT_CHATML_FIELDS, .default_system = RAD_CHAT_QWEN_SYSTEM, RAD_CHAT_QWEN_TOOLS_FIELDS("{", "}")};
/* Qwen2.5-Coder-1.5B-Instruct's template: the same, but its tool instructions show the call
 * as "{{"name": ...}}" (a Jinja string literal's braces, doubled in that checkpoint). */
static const RadChatFormat rad_chat_chatml_qwen_braces = {
    RAD_CHAT_CHATML_FIELDS, .default_system = RAD_CHAT_QWEN_SYSTEM, RAD_CHAT_QWEN_TOOLS_FIELDS("{{", "}}")};

/* Qwen3's template: ChatML with no default system turn, a reply that opens with its reasoning
 * inside <think>...</think> (split out as reasoning_content), and Qwen's tools. The generation
 * prompt is the plain "<|im_start|>assistant\n" (thinking on: the model writes the <think>
 * itself). Not rendered as the template does: a final assistant turn after the last user turn,
 * which the template prefixes with an empty "<think>\n\n</think>\n\n" block. */
static const RadChatFormat rad_chat_chatml_qwen3 = {
    RAD_CHAT_CHATML_FIELDS, .default_system = NULL, .reasoning_start = "<think>", .reasoning_end = "</think>",
    RAD_CHAT_QWEN_TOOLS_FIELDS("{", "}")};

/* Llama 3 headers. The BOS is in the template; every turn ends with <|eot_id|>. */
#define RAD_CHAT_LLAMA3_FIELDS                                                                          \
    .struct_size = sizeof(RadChatFormat), .kind = "llama3", .bos = "<|begin_of_text|>",                \
    .system_start = "<|start_header_id|>system<|end_header_id|>\n\n", .system_end = "<|eot_id|>",      \
    .user_start = "<|start_header_id|>user<|end_header_id|>\n\n", .user_end = "<|eot_id|>",            \
    .assistant_start = "<|start_header_id|>assistant<|end_header_id|>\n\n", .assistant_end = "<|eot_id|>", \
    .stop = rad_chat_stop_llama3
static const RadChatFormat rad_chat_llama3 = {RAD_CHAT_LLAMA3_FIELDS, .default_system = NULL};
/* Llama 3.1+ templates always open with a system turn carrying the knowledge-cutoff lines (the
 * template's default date); a chat with its own system message loses them (no field says
 * "prefix the system text"). */
static const RadChatFormat rad_chat_llama31 = {
    RAD_CHAT_LLAMA3_FIELDS,
    .default_system = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"};

/* Llama 2 chat: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] ...".
 * The template puts the system block inside the first user turn, after "[INST] "; a renderer
 * that writes system_start..system_end before user_start gets "<<SYS>>" ahead of "[INST]", so
 * the format says RAD_CHAT_SYSTEM_IN_FIRST_USER; its `bos` text is the BOS token. */
static const RadChatFormat rad_chat_llama2 = {
    .struct_size = sizeof(RadChatFormat), .kind = "llama2", .bos = "<s>",
    .system_start = "<<SYS>>\n", .system_end = "\n<</SYS>>\n\n",
    .user_start = "[INST] ", .user_end = " [/INST]",
    .assistant_start = "", .assistant_end = " </s><s>",
    .default_system = NULL, .stop = rad_chat_stop_eos_s,
    .flags = RAD_CHAT_SYSTEM_IN_FIRST_USER | RAD_CHAT_NO_AUTO_BOS,
};

/* Zephyr, as TinyLlama-1.1B-Chat's template writes it: "<|role|>\ncontent</s>\n". */
static const RadChatFormat rad_chat_zephyr = {
    .struct_size = sizeof(RadChatFormat), .kind = "zephyr", .bos = "<s>",
    .system_start = "<|system|>\n", .system_end = "</s>\n",
    .user_start = "<|user|>\n", .user_end = "</s>\n",
    .assistant_start = "<|assistant|>\n", .assistant_end = "</s>\n",
    .default_system = NULL, .stop = rad_chat_stop_eos_s,
};

/* Gemma's turns, as the instruction-tuned Gemma 3 templates write them: "<bos>" once, then
 * "<start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n" (a system message goes inside the
 * first user turn), the model's turns as "<start_of_turn>model\n...<end_of_turn>\n"; each turn's
 * content `| trim`med, and user/model turns must alternate (the template raises otherwise). */
static const char *const rad_chat_stop_gemma[] = {"<end_of_turn>", "<eos>", NULL};
static const RadChatFormat rad_chat_gemma = {
    .struct_size = sizeof(RadChatFormat), .kind = "gemma", .bos = "<bos>",
    .system_start = "", .system_end = "\n\n",
    .user_start = "<start_of_turn>user\n", .user_end = "<end_of_turn>\n",
    .assistant_start = "<start_of_turn>model\n", .assistant_end = "<end_of_turn>\n",
    .default_system = NULL, .stop = rad_chat_stop_gemma,
    .flags = RAD_CHAT_SYSTEM_IN_FIRST_USER | RAD_CHAT_NO_AUTO_BOS | RAD_CHAT_TRIM_CONTENT | RAD_CHAT_ALTERNATE,
};

/* Which variant of a kind the template (or, without one, the checkpoint's name) asks for. */
typedef struct RadChatHints {
    int smollm;   /* ChatML with SmolLM2's default system turn */
    int llama31;  /* Llama 3 with the 3.1+ knowledge-cutoff system turn */
    int qwen;     /* ChatML with Qwen2.5's default system turn and tools */
    int qwen_braces; /* Qwen2.5's, with the tool instructions' braces doubled (Qwen2.5-Coder-1.5B) */
    int think;    /* ChatML whose replies open with <think> reasoning (Qwen3) */
} RadChatHints;

/* The markup a text shows, or NULL. */
static inline const RadChatFormat *rad_chat_from_markup(const char *t, RadChatHints h) {
    if (!t) return NULL;
    if (strstr(t, "<|im_start|>"))
        return h.smollm ? &rad_chat_chatml_smollm
               : h.qwen ? (h.qwen_braces ? &rad_chat_chatml_qwen_braces : &rad_chat_chatml_qwen)
               : h.think ? &rad_chat_chatml_qwen3
                         : &rad_chat_chatml;
    if (strstr(t, "<|start_header_id|>")) return h.llama31 ? &rad_chat_llama31 : &rad_chat_llama3;
    if (strstr(t, "<|user|>") && strstr(t, "<|assistant|>")) return &rad_chat_zephyr;
    if (strstr(t, "[INST]")) return &rad_chat_llama2;
    return NULL;
}

/* See the header comment. `fallback` is returned when nothing in the metadata decides. */
static inline const RadChatFormat *rad_chat_format_pick(const RadModelMeta *m, const RadChatFormat *fallback) {
    const char *tmpl = rad_meta_find(m, "chat.template");
    const char *kind = rad_meta_find(m, "chat.kind");
    const char *name = (m && m->name) ? m->name : "";
    RadChatHints h;
    const RadChatFormat *f;
    h.smollm = tmpl ? strstr(tmpl, "named SmolLM") != NULL : strstr(name, "SmolLM") != NULL;
    h.llama31 = tmpl != NULL && strstr(tmpl, "Cutting Knowledge Date") != NULL;
    h.qwen = tmpl != NULL && strstr(tmpl, RAD_CHAT_QWEN_SYSTEM) != NULL;
    h.qwen_braces = tmpl != NULL && strstr(tmpl, "<tool_call>\\n{{\\\"name\\\": <function-name>") != NULL;
    /* Qwen3's template splits <think>...</think> out of past replies; Qwen2.5's has no <think> */
    h.think = tmpl != NULL && strstr(tmpl, "<think>") != NULL;
    if (kind) {
        if (strcmp(kind, "chatml") == 0) return rad_chat_from_markup("<|im_start|>", h);
        if (strcmp(kind, "llama3") == 0) return rad_chat_from_markup("<|start_header_id|>", h);
        if (strcmp(kind, "llama2") == 0) return &rad_chat_llama2;
        if (strcmp(kind, "zephyr") == 0) return &rad_chat_zephyr;
    }
    if ((f = rad_chat_from_markup(tmpl, h)) != NULL) return f;
    /* the tokenizer's special tokens: any tokenizer.* value (token lists, as the core renders
     * them), then the template's BOS/EOS text */
    const char *key, *val;
    for (int32_t i = 0; i < rad_meta_count(m); i++)
        if (rad_meta_entry(m, i, &key, &val) && strncmp(key, "tokenizer.", 10) == 0 &&
            (f = rad_chat_from_markup(val, h)) != NULL)
            return f;
    const char *eos = rad_meta_find(m, "chat.eos"), *bos = rad_meta_find(m, "chat.bos");
    if (eos && strcmp(eos, "<|im_end|>") == 0) return rad_chat_from_markup("<|im_start|>", h);
    if ((eos && strcmp(eos, "<|eot_id|>") == 0) || (bos && strcmp(bos, "<|begin_of_text|>") == 0))
        return rad_chat_from_markup("<|start_header_id|>", h);
    return fallback;
}

#endif
