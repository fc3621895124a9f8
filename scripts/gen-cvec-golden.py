#!/usr/bin/env python3
"""Dev-time: writes the control-vector goldens in tests/fixtures/cvec/ (--control-vector's
oracle; tests/runtime/cvec_test.c reads them, docs/ORACLE.md describes the .bin layout):

    /work/venv-hf/bin/python scripts/gen-cvec-golden.py            # SmolLM2, ~1 minute
    /work/venv-hf/bin/python scripts/gen-cvec-golden.py --gemma3   # + Gemma 3 270M, ~1 more

For each model, one control vector in llama.cpp's format (general.architecture "controlvector",
controlvector.model_hint, controlvector.layer_count, one f32 [n_embd] tensor "direction.L" per
steered layer L), written with the gguf package as llama.cpp's cvector-generator writes it:
seeded random directions of a fixed norm on a few layers, the last layer among them, every other
layer without one. The oracle is transformers on the dequantised GGUF in f32 (scripts/gen-oracle.py's
loading, reused), with a forward hook on decoder layer L that adds direction.L to the layer's
output: llama.cpp's `cvec.apply_to(cur, il)` after the layer's last residual add (il = L, layer 0
never steered). Each case is a RADORCL1 file (gen-oracle.py's write_case: the prompt, the steered
greedy continuation, the teacher-forced top-K log-probabilities at every position) and, for the
CLI check, the steered continuation as text up to the first end-of-sequence token.

The steered continuation must differ from the unsteered one (else a plugin ignoring the vector
would pass) and keep a top-1 margin of MIN_MARGIN along it (no near-tie for f32 rounding to flip);
the script refuses to write goldens that break either.
"""
import argparse
import importlib.util
import json
import os

import gguf
import numpy as np
import torch

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "cvec")
spec = importlib.util.spec_from_file_location("gen_oracle", os.path.join(ROOT, "scripts", "gen-oracle.py"))
go = importlib.util.module_from_spec(spec)
spec.loader.exec_module(go)

MIN_MARGIN = 0.05
PROMPTS = [p for p in go.SMOL_PROMPTS if p[0] in ("capital", "weekdays", "list")]

# name: (GGUF under models/, norm and embedding classes, model hint, steered layers, direction norm, seed, EOS ids, BOS)
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf", ("LlamaRMSNorm", "Embedding"), "llama",
                (3, 9, 15, 22, 29), 12.0, 5, (0, 2), False),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", ("Gemma3RMSNorm", "Gemma3TextScaledWordEmbedding"), "gemma3",
               (2, 7, 11, 17), 15.0, 5, (1, 106), True),
}


def directions(n_embd, layers, norm, seed):
    """{L: f32 [n_embd]}: a standard normal draw per layer, scaled to `norm`."""
    rng = np.random.default_rng(seed)
    out = {}
    for l in layers:
        v = rng.standard_normal(n_embd)
        out[l] = (v * (norm / np.linalg.norm(v))).astype(np.float32)
    return out


def write_cvec(path, hint, dirs):
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", hint)
    w.add_int32("controlvector.layer_count", len(dirs))
    for l in sorted(dirs):
        w.add_tensor(f"direction.{l}", dirs[l])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def steer(model, dirs):
    """Forward hooks adding dirs[L] to decoder layer L's output; returns the handles."""
    def hook(d):
        def add(_mod, _inp, out):
            if isinstance(out, tuple):
                return (out[0] + d,) + tuple(out[1:])
            return out + d
        return add
    layers = model.model.layers
    return [layers[l].register_forward_hook(hook(torch.from_numpy(d))) for l, d in dirs.items()]


def gen_model(name):
    fname, (norm_cls, emb_cls), hint, layers, norm, seed, eos_ids, add_bos = MODELS[name]
    path = os.path.join(ROOT, "models", fname)
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    torch.manual_seed(0)
    torch.set_num_threads(go.THREADS)
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=fname)
    model = go.plain(AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=fname, dtype=torch.float32, attn_implementation="eager",
        quantization_config=GgufConfig(dequantize=True)), torch.float32, norm_cls, emb_cls)
    cfg = model.config
    n_embd, n_layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    assert max(layers) == n_layers - 1 and min(layers) >= 1, layers
    dirs = directions(n_embd, layers, norm, seed)
    cv = f"steer-{name}.gguf"
    write_cvec(os.path.join(OUT, cv), hint, dirs)
    meta = {"control_vector": cv, "source": os.path.relpath(path, ROOT), "sha256": go.sha256(path),
            "n_embd": n_embd, "n_layers": n_layers, "layers": list(layers), "norm": norm, "seed": seed,
            "oracle": "transformers f32 on the dequantised GGUF; forward hook on model.layers[L] adds direction.L "
                      "to its output (llama.cpp: cvec.apply_to after the layer's residual add)",
            "versions": {"torch": torch.__version__, "transformers": go.transformers.__version__, "gguf": gguf.__version__
                         if hasattr(gguf, "__version__") else "?"}, "cases": []}
    rows = []
    for case, kind, text in PROMPTS:
        prompt_ids = tok(text, add_special_tokens=add_bos)["input_ids"]
        base, _, _ = go.run_case(model, prompt_ids)
        hs = steer(model, dirs)
        try:
            gen, logits, margins = go.run_case(model, prompt_ids)
        finally:
            for h in hs:
                h.remove()
        cont, plain_cont = tok.decode(gen), tok.decode(base)
        print(f"  {name} {case:9s} margin {min(margins):6.3f}\n    plain   {plain_cont!r}\n    steered {cont!r}")
        if gen == base:
            raise SystemExit(f"{name} {case}: the steered continuation is the unsteered one (raise the norm)")
        if min(margins) < MIN_MARGIN:
            raise SystemExit(f"{name} {case}: greedy margin {min(margins):.3f} below {MIN_MARGIN} (another seed)")
        fn = f"{name}-{case}.bin"
        go.write_case(os.path.join(OUT, fn), vocab, prompt_ids, gen, logits, [])
        eos = [i for i, t in enumerate(gen) if t in eos_ids]
        with open(os.path.join(OUT, f"{name}-{case}.txt"), "wb") as f:  # exact bytes, no newline added
            f.write(tok.decode(gen[:eos[0]] if eos else gen).encode("utf-8"))
        first_diff = next(i for i, (a, b) in enumerate(zip(gen, base)) if a != b)
        meta["cases"].append({"file": fn, "prompt": text, "n_prompt": len(prompt_ids), "continuation": cont,
                              "unsteered": plain_cont, "first_difference": first_diff,
                              "min_greedy_margin": min(margins), "first_eos": eos[0] if eos else None})
        rows.append(f"{fn} {name} {len(prompt_ids)} {go.GEN}\n")
    return meta, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemma3", action="store_true", help="also Gemma 3 270M (models/, make models)")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    meta, rows = {}, []
    for name in ["smollm2"] + (["gemma3"] if args.gemma3 else []):
        meta[name], r = gen_model(name)
        rows += r
    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write("# file model n_prompt n_gen: scripts/gen-cvec-golden.py; the vector is steer-<model>.gguf\n")
        f.writelines(rows)
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
