#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/oracle/smollm2-chat-golden.json, the greedy replies Hugging Face
transformers gives in a two-turn chat with SmolLM2-135M-Instruct, which tests/text/chat_test.c
compares `radiance --chat --temp 0 -n 32` against.

    /work/venv/bin/python scripts/gen-chat-golden.py            # ~1 minute
    /work/venv/bin/python scripts/gen-chat-golden.py --check    # regenerate in memory, compare with the committed file
    /work/venv/bin/python scripts/gen-chat-golden.py --sensitivity   # + which rendering mistakes change a reply

The model and tokenizer are loaded exactly as scripts/gen-oracle.py loads them (the Q4_1 GGUF
dequantised to f32, f32 compute, eager attention, one CPU thread). Each turn renders the whole
conversation so far with the tokenizer's own chat template (`apply_chat_template`,
add_generation_prompt=True: SmolLM2's template opens with its default system turn when the
chat has none), prefills it, and generates greedily (argmax, first maximum on ties) up to
MAX_NEW tokens, stopping at <|im_end|> (the GGUF's EOS), which is not part of the reply. The
second turn's conversation holds the first reply as the assistant message, as a chat client
would send it.

Beside the text, the file records the token ids (the rendered prompts and the replies), whether
each reply stopped at <|im_end|>, the smallest top-1 minus top-2 logit margin of each reply's
greedy choices, and whether the second prompt's ids begin with first prompt ++ first reply ++
the template's turn end (what an engine that keeps the first turn in its KV cache has fed).
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "oracle", "smollm2-chat-golden.json")
MAX_NEW = 32
# Two user turns; the second only makes sense after the first (it sees the first reply). The
# first reply ends with <|im_end|> inside MAX_NEW tokens (asserted below), so the test does not
# depend on how a reply cut at the token limit is kept in the conversation; the second is cut at
# MAX_NEW. Chosen because the replies depend on the rendering: in transformers, leaving out the
# default system turn or ending it with a period changes the first reply; leaving out the "\n"
# after a turn's <|im_end|>, the system turn before the history, or the history itself changes
# the second (scripts/gen-chat-golden.py --sensitivity re-checks this).
USER = ["What is your name?", "Who made you?"]


def load_gen_oracle():
    spec = importlib.util.spec_from_file_location("gen_oracle", os.path.join(ROOT, "scripts", "gen-oracle.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@torch.no_grad()
def reply(model, prompt_ids, stop_id):
    """Greedy from a fresh prefill of prompt_ids: (reply ids without the stop token, stopped, margins)."""
    out = model(input_ids=torch.tensor([prompt_ids], dtype=torch.long), use_cache=True)
    past, last = out.past_key_values, out.logits[0, -1].float()
    ids, margins = [], []
    for step in range(MAX_NEW):
        t2 = torch.topk(last, 2)
        margins.append(float(t2.values[0] - t2.values[1]))
        nxt = int(torch.argmax(last))
        if nxt == stop_id:
            return ids, True, margins
        ids.append(nxt)
        if step == MAX_NEW - 1:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, last = out.past_key_values, out.logits[0, -1].float()
    return ids, False, margins


def load():
    go = load_gen_oracle()
    torch.manual_seed(0)
    torch.set_num_threads(go.THREADS)
    torch.use_deterministic_algorithms(True)
    folder, name = os.path.split(go.GGUF)
    return go, AutoTokenizer.from_pretrained(folder, gguf_file=name), go.load_smollm2()


def generate(go, tok, model):
    stop_id = tok.convert_tokens_to_ids("<|im_end|>")
    assert stop_id == tok.eos_token_id, (stop_id, tok.eos_token_id)
    messages, turns = [], []
    prev_ids = None
    for i, line in enumerate(USER):
        messages.append({"role": "user", "content": line})
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(prompt_ids) == text
        ids, stopped, margins = reply(model, prompt_ids, stop_id)
        # what radiance prints: the reply's text pieces, special tokens left out
        answer = tok.decode(ids, skip_special_tokens=True)
        turn = {"user": line, "prompt": text, "prompt_ids": prompt_ids, "reply": answer, "reply_ids": ids,
                "stopped_at_im_end": stopped, "min_greedy_margin": min(margins)}
        if prev_ids is not None:
            # an engine that keeps the first turn in its cache has fed: prompt 1, reply 1 (as
            # generated), then the template's turn end "<|im_end|>\n" and the new user turn
            end = tok("<|im_end|>\n", add_special_tokens=False)["input_ids"]
            head = prev_ids + end
            turn["prompt_extends_previous_turn"] = prompt_ids[:len(head)] == head
        assert stopped or i == len(USER) - 1, f"turn {i + 1} was cut at {MAX_NEW} tokens: choose another first question"
        prev_ids = prompt_ids + ids
        turns.append(turn)
        messages.append({"role": "assistant", "content": answer})
        print(f"turn {i + 1}: {len(prompt_ids)} prompt tokens, {len(ids)} reply tokens, stopped {stopped}, "
              f"min margin {min(margins):.3f}: {answer!r}", file=sys.stderr)
    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__}
    return {
        "model": os.path.relpath(go.GGUF, ROOT), "sha256": go.sha256(go.GGUF),
        "load": "as scripts/gen-oracle.py (GGUF dequantised to f32, f32 compute, eager, 1 thread)",
        "chat_template": tok.chat_template, "max_new_tokens": MAX_NEW, "stop": "<|im_end|>",
        "greedy": "argmax, first maximum on ties; fresh prefill of the whole rendered conversation each turn",
        "radiance_stdout": "".join(t["reply"] + "\n" for t in turns),
        "turns": turns, "versions": versions}


def sensitivity(tok, model, g):
    """Renders the conversation with one thing wrong at a time and says whether transformers'
    greedy reply changes (it should, or the test would not see that mistake)."""
    stop_id = tok.eos_token_id
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    (u1, a1), (u2, a2) = [(t["user"], t["reply"]) for t in g["turns"]]

    def turn(role, text, end="<|im_end|>\n"):
        return f"<|im_start|>{role}\n{text}{end}"

    gp = "<|im_start|>assistant\n"
    assert turn("system", system) + turn("user", u1) + gp == g["turns"][0]["prompt"]
    variants = [
        (0, "no default system turn", turn("user", u1) + gp),
        (0, "system text ending with a period", turn("system", system + ".") + turn("user", u1) + gp),
        (1, "no \\n after the first reply's <|im_end|>",
         turn("system", system) + turn("user", u1) + turn("assistant", a1, "<|im_end|>") + turn("user", u2) + gp),
        (1, "no system turn before the history", turn("user", u1) + turn("assistant", a1) + turn("user", u2) + gp),
        (1, "the first reply's last token lost", turn("system", system) + turn("user", u1) +
         turn("assistant", tok.decode(g["turns"][0]["reply_ids"][:-1])) + turn("user", u2) + gp),
        (1, "no history", turn("system", system) + turn("user", u2) + gp),
    ]
    for i, label, text in variants:
        ids, _, _ = reply(model, tok(text, add_special_tokens=False)["input_ids"], stop_id)
        changed = tok.decode(ids, skip_special_tokens=True) != g["turns"][i]["reply"]
        print(f"  turn {i + 1}, {label}: reply {'changes' if changed else 'UNCHANGED'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also show which rendering mistakes change the replies")
    args = ap.parse_args()
    go, tok, model = load()
    g = generate(go, tok, model)
    if args.sensitivity:
        sensitivity(tok, model, g)
    text = json.dumps(g, indent=1, ensure_ascii=False) + "\n"
    if args.check:
        with open(OUT, encoding="utf-8") as f:
            old = json.load(f)
        same = all(old["turns"][i][k] == g["turns"][i][k] for i in range(len(g["turns"]))
                   for k in ("prompt_ids", "reply_ids", "reply"))
        print("matches the committed golden" if same else "DIFFERS from the committed golden")
        return 0 if same else 1
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(OUT, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
