#!/usr/bin/env python3
"""Dev-time: tests/fixtures/chat/<model>.json, what transformers' apply_chat_template writes with a
model's own template (its GGUF's tokenizer.chat_template), for tests/text/chat_render_test.c.

    /work/venv-hf4/bin/python scripts/gen-chat-render-goldens.py   (transformers 4.57, gguf, jinja2; no torch)

Each case: the OpenAI-style messages, add_generation_prompt, the rendered text, and the token
ids of tokenize=True (the whole path the server takes: render, then encode).

TOOL_CASES (tests/fixtures/chat/<name>-tools.json): requests with OpenAI `tools`, assistant
`tool_calls` and `tool` results, for Qwen2.5 (the 0.5B's template), Qwen2.5-Coder-1.5B's (its
own template, committed as qwen25-coder-1.5b.jinja: its tool instructions double their braces)
and Qwen3. The messages are stored as a client sends them (arguments a JSON string); transformers
is given the arguments parsed (json.loads), as vLLM does before it applies a template, since a
template's `tojson` of the string would quote it.

TEMPLATES: a model with no checkpoint here, only its template committed beside the goldens
(Qwen3: tests/fixtures/chat/qwen3-0.6b.jinja, Qwen/Qwen3-0.6B's chat_template as llama.cpp keeps
it in models/templates/Qwen-Qwen3-0.6B.jinja). Rendered with that template (chat_template=...),
text only: no Qwen3 tokenizer is on PyPI, so no ids."""
import json
import os

import gguf
import transformers.modeling_gguf_pytorch_utils as _gguf_utils
from tokenizers import AddedToken
from transformers import AutoTokenizer

# transformers 4.x reads a GGUF's tokenizer only through its checkpoint loader, which asks for
# torch although reading metadata (return_tensors=False) never uses it
_gguf_utils.is_torch_available = lambda: True


def gguf_tokenizer(fname, user_defined=False):
    """AutoTokenizer on a GGUF; for Qwen (user_defined), with its user-defined tokens (type 4: Qwen's <tool_call>,
    <tool_response>, ...) added as the model's own tokenizer.json lists them (added, not special,
    matched in text); transformers' GGUF reader leaves them out, so "<tool_call>" would be split
    into pieces, which neither the model's tokenizer nor llama.cpp does (docs/TOKENIZER.md)."""
    path = os.path.join(ROOT, "models", fname)
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models"), gguf_file=fname)
    if not user_defined:
        return tok
    r = gguf.GGUFReader(path)
    toks, types = r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.token_type"]
    user = [bytes(toks.parts[toks.data[i]]).decode() for i in range(len(types.data)) if types.parts[types.data[i]][0] == 4]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    return tok

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# name: (GGUF under models/ for the tokenizer, a template file replacing the GGUF's, or None)
MODELS = {
    "qwen25": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", None),
    # Gemma 3's instruction-tuned template (google/gemma-3-*-it tokenizer_config.json's chat_template),
    # on the 270M base's tokenizer (the same vocabulary; the base GGUF has no template)
    "gemma3-it": ("gemma-3-270m-q4_k_m.gguf", "tests/fixtures/chat/gemma3-it.jinja"),
}
CASES = [
    ([{"role": "user", "content": "Hi"}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": "Bye"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], False),
    ([{"role": "system", "content": "Réponds en français."},
      {"role": "user", "content": "Écris une fonction qui inverse une chaîne. 日本語も"}], True),
    ([{"role": "user", "content": "First"}, {"role": "system", "content": "A later system turn."},
      {"role": "user", "content": "Second"}], True),
    ([{"role": "system", "content": "  Padded system.\n"}, {"role": "user", "content": "\n\t  Padded user.  \u3000\n"},
      {"role": "assistant", "content": " Padded reply. "}, {"role": "user", "content": "x"}], True),
]


TEMPLATES = {
    # name: (template under tests/fixtures/chat, the tokenizer apply_chat_template runs on, cases)
    # Qwen3's template writes a final assistant turn after the last user turn with an empty
    # <think> block before it, which Radiance's ChatML does not: that case is left out
    "qwen3": ("qwen3-0.6b.jinja", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", [c for c in CASES if c[1]]),
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city (°C or °F).",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {
    "name": "search_code", "description": "Search a repository.\nReturns paths.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
        "score": {"type": "number", "default": 0.5}}, "required": ["query"]}}}
NOPARAM = {"type": "function", "function": {"name": "now", "description": "The time."}}


def call(name, args, i=0):
    return {"id": "call_%d" % i, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


TOOL_CASES = [
    ([{"role": "user", "content": "What is the weather in Paris?"}], [WEATHER], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Zürich?"}], [WEATHER, SEARCH], True),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"})]},
      {"role": "tool", "tool_call_id": "call_0", "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}], [WEATHER], True),
    ([{"role": "user", "content": "Find the parser and the weather in 東京"},
      {"role": "assistant", "content": "I will call two tools.",
       "tool_calls": [call("search_code", {"query": "parser", "max_results": 3, "score": 0.25}, 0),
                      call("get_weather", {"city": "東京"}, 1)]},
      {"role": "tool", "tool_call_id": "call_0", "content": "src/parse.c"},
      {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
      {"role": "user", "content": "Thanks"}], [SEARCH, WEATHER, NOPARAM], True),
    ([{"role": "user", "content": "Time?"},
      {"role": "assistant", "content": "", "tool_calls": [call("now", {})]},
      {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
      {"role": "assistant", "content": "It is noon."}], [NOPARAM], False),
    # no tools offered, but a history with calls and results: the templates render them anyway
    ([{"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {"city": "Oslo", "nested": {"a": [1, 2.0, None, True]}})]},
      {"role": "tool", "tool_call_id": "call_0", "content": "snow"}], None, True),
]


def for_transformers(msgs):
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""  # what the server reads a null content as; Qwen3's template needs a string
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def tool_goldens(out, name, tok, template=None, gen_only=False):
    cases = []
    for msgs, tools, gen in TOOL_CASES:
        if gen_only and not gen:  # Qwen3: a final assistant turn gets an empty <think> block (TEMPLATES)
            continue
        kw = {"chat_template": template} if template else {}
        text = tok.apply_chat_template(for_transformers(msgs), tools=tools, tokenize=False, add_generation_prompt=gen, **kw)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        cases.append({"messages": msgs, "tools": tools, "add_generation_prompt": gen, "text": text, "ids": ids})
    with open(os.path.join(out, name + "-tools.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(name + "-tools", len(cases), "cases")


def main():
    out = os.path.join(ROOT, "tests", "fixtures", "chat")
    os.makedirs(out, exist_ok=True)
    for name, (fname, tmpl) in MODELS.items():
        tok = gguf_tokenizer(fname, fname.startswith("qwen"))
        if tmpl:
            tok.chat_template = open(os.path.join(ROOT, tmpl), encoding="utf-8").read()
        cases = []
        for msgs, gen in CASES:
            try:
                text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            except Exception as ex:  # the template refuses it (Gemma: roles must alternate)
                cases.append({"messages": msgs, "add_generation_prompt": gen, "refused": str(ex)})
                continue
            ids = tok(text, add_special_tokens=False)["input_ids"]  # the template writes any BOS itself
            cases.append({"messages": msgs, "add_generation_prompt": gen, "text": text, "ids": ids})
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"model": fname, "cases": cases}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, len(cases), "cases")
    for name, (tmpl, carrier, case_list) in TEMPLATES.items():
        tok = gguf_tokenizer(carrier, carrier.startswith("qwen"))
        with open(os.path.join(out, tmpl), encoding="utf-8") as f:
            template = f.read()
        cases = [{"messages": msgs, "add_generation_prompt": gen,
                  "text": tok.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=gen)}
                 for msgs, gen in case_list]
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"template": tmpl, "cases": cases}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, len(cases), "cases (template", tmpl + ")")
    qtok = gguf_tokenizer("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", True)
    tool_goldens(out, "qwen25", qtok)
    for name, tmpl in (("qwen25-coder-1.5b", "qwen25-coder-1.5b.jinja"), ("qwen3", "qwen3-0.6b.jinja")):
        with open(os.path.join(out, tmpl), encoding="utf-8") as f:
            tool_goldens(out, name, qtok, f.read(), name == "qwen3")


if __name__ == "__main__":
    main()
