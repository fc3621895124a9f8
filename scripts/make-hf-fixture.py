#!/usr/bin/env python3
"""Writes tests/fixtures/hf/tiny-llama/: a tiny Hugging Face llama folder (config.json,
generation_config.json, a 50-token byte-level BPE tokenizer.json, tokenizer_config.json with a
ChatML template, and two safetensors shards with model.safetensors.index.json), and the seed
corpora fuzz/corpus/fuzz_safetensors/ and fuzz/corpus/fuzz_json/.

The shards are written by the reference `safetensors` package, so the C reader is checked
against files it did not make itself. Dev-time only; the output is committed.
    pip install numpy safetensors && python3 scripts/make-hf-fixture.py
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "hf", "tiny-llama")

HIDDEN, FF, LAYERS, HEADS, KV_HEADS, VOCAB = 16, 32, 2, 4, 2, 50
HEAD_DIM = HIDDEN // HEADS


def dump(name, obj):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def config():
    return {
        "_name_or_path": "radiance/tiny-llama",
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": FF,
        "max_position_embeddings": 256,
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 64,
            "rope_type": "llama3",
        },
        "rope_theta": 100000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def generation_config():
    return {
        "bos_token_id": 1,
        "do_sample": True,
        "eos_token_id": [2, 0],
        "temperature": 0.6,
        "top_p": 0.9,
        "transformers_version": "4.46.0",
    }


SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
          ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"), ("i", "n"), ("Ġ", "t"), ("Ġt", "h"),
          ("Ġth", "e"), ("a", "n"), ("Ġ", "a")]


def tokenizer():
    base = SPECIAL + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", ".", ",", "0", "1", "2"]
    vocab = base + [a + b for a, b in MERGES]
    assert len(vocab) == VOCAB, len(vocab)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIAL)]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True},
            ],
        },
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(vocab)},
            "merges": [a + " " + b for a, b in MERGES],
        },
    }


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def tokenizer_config():
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True} for i, t in enumerate(SPECIAL)},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": "<|im_start|>",
        "chat_template": CHATML,
        "clean_up_tokenization_spaces": False,
        "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False,
                      "rstrip": False, "single_word": False, "__type": "AddedToken"},
        "model_max_length": 256,
        "pad_token": "<|im_end|>",
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": "<|endoftext|>",
        "vocab_size": VOCAB,
    }


def pattern(shape, dtype, seed):
    """Deterministic values the tests can recompute: (i * 7 + seed) % 17 - 8, scaled by 1/8."""
    n = int(np.prod(shape)) if shape else 1
    v = ((np.arange(n) * 7 + seed) % 17 - 8).astype(np.float32) / 8.0
    return v.reshape(shape).astype(dtype)


def weights():
    shards = [{}, {}]
    seed = 0

    def add(shard, name, shape, dtype=np.float16):
        nonlocal seed
        seed += 1
        shards[shard][name] = pattern(shape, dtype, seed)

    add(0, "model.embed_tokens.weight", (VOCAB, HIDDEN))
    for layer in range(LAYERS):
        s = layer  # layer 0 in shard 1, layer 1 in shard 2
        p = f"model.layers.{layer}."
        add(s, p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN))
        add(s, p + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN))
        add(s, p + "self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN))
        add(s, p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM))
        add(s, p + "mlp.gate_proj.weight", (FF, HIDDEN))
        add(s, p + "mlp.up_proj.weight", (FF, HIDDEN))
        add(s, p + "mlp.down_proj.weight", (HIDDEN, FF))
        add(s, p + "input_layernorm.weight", (HIDDEN,), np.float32)
        add(s, p + "post_attention_layernorm.weight", (HIDDEN,), np.float32)
    add(1, "model.norm.weight", (HIDDEN,), np.float32)
    add(1, "lm_head.weight", (VOCAB, HIDDEN))
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map, total = {}, 0
    for shard, fname in zip(shards, names):
        save_file(shard, os.path.join(OUT, fname), metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = fname
            total += v.nbytes
    dump("model.safetensors.index.json",
         {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def raw_safetensors(header, data):
    """A safetensors file from a header dict and data bytes, for dtypes numpy lacks."""
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def seeds():
    st = os.path.join(ROOT, "fuzz", "corpus", "fuzz_safetensors")
    js = os.path.join(ROOT, "fuzz", "corpus", "fuzz_json")
    os.makedirs(st, exist_ok=True)
    os.makedirs(js, exist_ok=True)
    tensors = {
        "f64": np.arange(3, dtype=np.float64), "f32": np.ones((2, 2), np.float32),
        "f16": np.zeros((1, 2, 2), np.float16), "i64": np.array(-1, np.int64),
        "i32": np.arange(2, dtype=np.int32), "i16": np.arange(2, dtype=np.int16),
        "i8": np.arange(4, dtype=np.int8), "u8": np.arange(5, dtype=np.uint8),
        "bool": np.array([True, False]), "empty": np.zeros((0, 3), np.float32),
    }
    save_file(tensors, os.path.join(st, "dtypes.safetensors"), metadata={"format": "pt"})
    save_file({"w": np.ones(4, np.float32)}, os.path.join(st, "one.safetensors"))
    with open(os.path.join(st, "fp8_bf16.safetensors"), "wb") as f:
        f.write(raw_safetensors({
            "__metadata__": {"format": "pt"},
            "b": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
            "e4": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [4, 8]},
            "e5": {"dtype": "F8_E5M2", "shape": [1], "data_offsets": [8, 9]},
        }, bytes(range(9))))
    with open(os.path.join(st, "empty.safetensors"), "wb") as f:
        f.write(raw_safetensors({}, b""))

    def seed(name, sel, *parts):
        with open(os.path.join(js, name), "wb") as f:
            f.write(bytes([sel]) + b"\0".join(parts))

    def read(name):
        with open(os.path.join(OUT, name), "rb") as f:
            return f.read()

    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        with open(os.path.join(st, name), "wb") as f:
            f.write(read(name))
    seed("config", 0, read("config.json"))
    seed("generation", 1, read("generation_config.json"))
    seed("tokenizer", 2, read("tokenizer.json"))
    seed("tokenizer_pair", 3, read("tokenizer.json"), read("tokenizer_config.json"))
    llama = {"added_tokens": [{"id": 0, "content": "<unk>", "special": True}],
             "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}]},
             "post_processor": {"type": "TemplateProcessing", "single": [
                 {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
             "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>",
                       "vocab": {"<unk>": 0, "<s>": 1, "<0x41>": 2, "▁a": 3, "a": 5},
                       "merges": [["▁", "a"]]}}
    seed("tokenizer_llama", 3, json.dumps(llama).encode(), json.dumps(
        {"bos_token": {"content": "<s>"}, "chat_template": [{"name": "default", "template": "[INST]"}]}).encode())
    seed("tokenizer_unigram", 2, json.dumps({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0], ["a", -1.5]]}}).encode())


def main():
    os.makedirs(OUT, exist_ok=True)
    dump("config.json", config())
    dump("generation_config.json", generation_config())
    dump("tokenizer.json", tokenizer())
    dump("tokenizer_config.json", tokenizer_config())
    weights()
    seeds()
    for d in (OUT, os.path.join(ROOT, "fuzz", "corpus", "fuzz_safetensors")):
        for name in os.listdir(d):
            os.chmod(os.path.join(d, name), 0o644)  # save_file makes 0600 files
    print("wrote", os.path.normpath(OUT), "and the fuzz seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
