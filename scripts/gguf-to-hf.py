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
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

src, out = sys.argv[1], sys.argv[2]
folder, name = os.path.split(os.path.abspath(src))
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.bfloat16)
tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
# transformers will not save_pretrained a model it loaded from GGUF; its weights are dequantised
# plain tensors by now, so write them and the config ourselves.
sd = {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in model.state_dict().items()}
if model.config.tie_word_embeddings:
    sd.pop("lm_head.weight", None)
os.makedirs(out, exist_ok=True)
save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
cfg = model.config
if hasattr(cfg, "quantization_config"):
    del cfg.quantization_config
cfg.torch_dtype = "bfloat16"
cfg.save_pretrained(out)
tok.save_pretrained(out)
print(f"{src} -> {out}: {sum(p.numel() for p in model.parameters())} parameters, bf16")
