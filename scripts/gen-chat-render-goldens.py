#!/usr/bin/env python3
"""Dev-time: tests/fixtures/chat/<model>.json, what transformers' apply_chat_template writes with a
model's own template (its GGUF's tokenizer.chat_template), for tests/text/chat_render_test.c.

    /work/venv-hf/bin/python scripts/gen-chat-render-goldens.py

Each case: the OpenAI-style messages, add_generation_prompt, the rendered text, and the token
ids of tokenize=True (the whole path the server takes: render, then encode).

TEMPLATES: a model with no checkpoint here, only its template committed beside the goldens
(Qwen3: tests/fixtures/chat/qwen3-0.6b.jinja, Qwen/Qwen3-0.6B's chat_template as llama.cpp keeps
it in models/templates/Qwen-Qwen3-0.6B.jinja). Rendered with that template (chat_template=...),
text only: no Qwen3 tokenizer is on PyPI, so no ids."""
import json
import os

from transformers import AutoTokenizer

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


def main():
    out = os.path.join(ROOT, "tests", "fixtures", "chat")
    os.makedirs(out, exist_ok=True)
    for name, (fname, tmpl) in MODELS.items():
        tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models"), gguf_file=fname)
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
        tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models"), gguf_file=carrier)
        with open(os.path.join(out, tmpl), encoding="utf-8") as f:
            template = f.read()
        cases = [{"messages": msgs, "add_generation_prompt": gen,
                  "text": tok.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=gen)}
                 for msgs, gen in case_list]
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"template": tmpl, "cases": cases}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(name, len(cases), "cases (template", tmpl + ")")


if __name__ == "__main__":
    main()
