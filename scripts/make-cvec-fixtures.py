#!/usr/bin/env python3
"""scripts/make-cvec-fixtures.py OUTDIR — llama.cpp control-vector GGUFs for --control-vector's
checks (tests/fixtures/cvec/), written with the gguf package as llama.cpp's cvector-generator
writes them: general.architecture "controlvector", controlvector.model_hint,
controlvector.layer_count, one f32 [n_embd] tensor "direction.L" per layer L >= 1.
Sized for SmolLM2-135M (n_embd 576, 30 layers); the bad ones each break one rule.
Run: /work/venv-gguf/bin/python scripts/make-cvec-fixtures.py tests/fixtures/cvec"""
import os
import sys

import gguf
import numpy as np


def write(path, dirs, n_embd=576):
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", "llama")
    w.add_int32("controlvector.layer_count", len(dirs))
    for name, v in dirs:
        w.add_tensor(name, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def vec(n=576, dt=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(n) * 0.1).astype(dt)


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
write(os.path.join(out, "good.gguf"), [("direction.1", vec(seed=1)), ("direction.29", vec(seed=29))])
write(os.path.join(out, "bad-len.gguf"), [("direction.1", vec(575))])
write(os.path.join(out, "bad-layer0.gguf"), [("direction.0", vec())])
write(os.path.join(out, "bad-layer30.gguf"), [("direction.30", vec())])
write(os.path.join(out, "bad-name.gguf"), [("direction.1", vec()), ("bias.1", vec())])
write(os.path.join(out, "bad-f16.gguf"), [("direction.1", vec(dt=np.float16))])
nan = vec()
nan[7] = np.nan
write(os.path.join(out, "bad-nan.gguf"), [("direction.1", nan)])
