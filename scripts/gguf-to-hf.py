#!/usr/bin/env python3
"""Dev-time: dequantise a GGUF with Hugging Face transformers and save it as a Hugging Face
folder (bf16 safetensors + tokenizer), the oracle's view of the same weights.

    python3 -m venv ~/venv && ~/venv/bin/pip install transformers torch gguf
    ~/venv/bin/python scripts/gguf-to-hf.py models/SmolLM2-135M-Instruct.Q4_1.gguf build/smollm2-hf
    build/rad-convert build/smollm2-hf -o build/smollm2-hf.rad

transformers un-permutes GGUF's Llama q/k rows on load, so the folder holds Hugging Face's
layout; scripts/crosscheck-convert.py compares it with rad-convert's own GGUF import.
"""
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

src, out = sys.argv[1], sys.argv[2]
folder, name = os.path.split(os.path.abspath(src))
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.bfloat16)
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
print(f"{src} -> {out}: {sum(p.numel() for p in model.parameters())} parameters, bf16")
