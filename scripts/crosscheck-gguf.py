#!/usr/bin/env python3
"""Dev-time oracle check: rad-info's view of a GGUF file against the `gguf` package's reader.

    python3 -m venv ~/venv && ~/venv/bin/pip install gguf numpy
    ~/venv/bin/python scripts/crosscheck-gguf.py build/rad-info models/SmolLM2-135M-Instruct.Q4_1.gguf

Compares every tensor (name, encoding, shape in row-major order, bytes, offset), the
architecture and dimensions, and the tokenizer sizes. Exits 1 on any difference.
"""
import json
import subprocess
import sys

import gguf

rad_info, path = sys.argv[1], sys.argv[2]
mine = json.loads(subprocess.run([rad_info, "--json", "--tensors", path], check=True,
                                 capture_output=True, text=True).stdout)
r = gguf.GGUFReader(path)
bad = 0


def fail(msg):
    global bad
    bad += 1
    print("MISMATCH", msg)


def field(name):
    f = r.fields.get(name)
    if f is None:
        return None
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[-1]).decode()
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return len(f.data)
    return f.parts[-1].tolist()[0]


arch = field("general.architecture")
m = mine["model"]
want = {
    "arch_id": arch,
    "n_layers": field(f"{arch}.block_count"),
    "n_embd": field(f"{arch}.embedding_length"),
    "n_head": field(f"{arch}.attention.head_count"),
    "n_head_kv": field(f"{arch}.attention.head_count_kv"),
    "n_ff": field(f"{arch}.feed_forward_length"),
    "n_ctx_train": field(f"{arch}.context_length"),
    "n_vocab": field(f"{arch}.vocab_size") or field("tokenizer.ggml.tokens"),
}
for k, v in want.items():
    if m[k] != v:
        fail(f"model.{k}: rad-info {m[k]!r}, gguf {v!r}")
for k, v in (("n_tokens", field("tokenizer.ggml.tokens")), ("n_merges", field("tokenizer.ggml.merges"))):
    if mine["tokenizer"][k] != v:
        fail(f"tokenizer.{k}: rad-info {mine['tokenizer'][k]}, gguf {v}")

if len(mine["tensors"]) != len(r.tensors):
    fail(f"tensor count: rad-info {len(mine['tensors'])}, gguf {len(r.tensors)}")
for t, g in zip(mine["tensors"], r.tensors):
    shape = [int(x) for x in reversed(g.shape.tolist())]  # gguf lists ne[] innermost first
    checks = {
        "name": (t["name"], g.name),
        "encoding": (t["encoding"], g.tensor_type.name.lower()),
        "shape": (t["shape"], shape),
        "bytes": (t["bytes"], int(g.n_bytes)),
        "offset": (mine["data_offset"] + t["planes"][0]["offset"], int(g.data_offset)),
    }
    for k, (a, b) in checks.items():
        if a != b:
            fail(f"tensor {g.name} {k}: rad-info {a!r}, gguf {b!r}")
print(f"{path}: {len(r.tensors)} tensors, {len(want) + 2} header fields compared, {bad} mismatches")
sys.exit(1 if bad else 0)
