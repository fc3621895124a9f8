#!/usr/bin/env python3
"""The oracle for tests/gpu/check.sh: transformers' greedy continuations of token-id prompts on a
Hugging Face folder (tests/gpu/make-models.py's random Llama), computed in f32 on the bf16
weights (what radiance's exact path computes), on the GPU when there is one.

    python3 tests/gpu/oracle.py MODEL_DIR N_NEW PROMPT [PROMPT ...]    (PROMPT: 1,2,3)

Prints one line per prompt: the N_NEW generated ids, comma-separated, and the smallest top-1
margin (logit of the chosen token minus the runner-up) over the continuation, after a tab: a
margin under ~1e-3 is a near tie, where another f32 summation order may choose the other token.
"""
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    path, n_new, prompts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 products, as the exact path
    torch.backends.cudnn.allow_tf32 = False
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).to(dev).eval()
    for p in prompts:
        ids = torch.tensor([[int(x) for x in p.split(",")]], device=dev)
        out, margin = [], float("inf")
        with torch.no_grad():
            for _ in range(n_new):
                logits = model(ids).logits[0, -1].double()
                top = torch.topk(logits, 2)
                margin = min(margin, float(top.values[0] - top.values[1]))
                t = int(top.indices[0])
                out.append(t)
                ids = torch.cat([ids, torch.tensor([[t]], device=dev)], dim=1)
        print(",".join(str(t) for t in out) + "\t%.3g" % margin)


if __name__ == "__main__":
    main()
