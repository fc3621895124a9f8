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
MODELS = {"qwen25": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}
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
    for name, fname in MODELS.items():
        tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models"), gguf_file=fname)
        cases = []
        for msgs, gen in CASES:
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            ids = tok(text, add_special_tokens=False)["input_ids"]
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
