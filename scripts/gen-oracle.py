#!/usr/bin/env python3
"""Dev-time: writes tests/fixtures/oracle/, the reference outputs (goldens) that the engine's
tests compare against, computed by Hugging Face transformers on the CPU in f32.

    /work/venv/bin/python scripts/gen-oracle.py               # ~3 minutes on 2 busy cores
    /work/venv/bin/python scripts/gen-oracle.py --calibrate   # + ~8 min: how bf16 weights / f64 compute / q8 activations score
    /work/venv/bin/python scripts/gen-oracle.py --verify      # only read the fixtures back and check them
    /work/venv/bin/python scripts/gen-oracle.py --calibrate-q8act  # ~5 min: score q8-quantised activations
                                                                    # against the committed files (meta.json only)
    /work/venv-hf/bin/python scripts/gen-oracle.py --family qwen05   # a real checkpoint's cases, spliced in
    /work/venv-hf/bin/python scripts/gen-oracle.py --tiny-qwen3      # ~10 s: the random Qwen3's cases, spliced in
    /work/venv-hf/bin/python scripts/gen-oracle.py --tiny-qwen3-fp8  # ~10 s: the random fp8 Qwen3's, spliced in
    /work/venv-hf/bin/python scripts/gen-oracle.py --tiny-qwen3-fp8-tensor  # its per-tensor twin's

Two models:
  smollm2          models/SmolLM2-135M-Instruct.Q4_1.gguf, dequantised to f32 by transformers'
                   GGUF loader (the same values Radiance's GGUF import holds), f32 compute;
  tiny-llama-bf16  tests/fixtures/tiny-llama-bf16 (scripts/make-tiny-llama.py), its bf16 weights
                   widened to f32, f32 compute; prompts are seeded random token ids.
and, spliced into MANIFEST and meta.json by their own modes, --family (a real checkpoint under
models/) and --tiny-qwen3 (tests/fixtures/tiny-qwen3-bf16 and its GGUF twin, as tiny-llama's).

For each case (model, prompt) one binary file <model>-<case>.bin holds the prompt's token ids,
the greedy continuation (GEN tokens, EOS not special), the top-K log-probabilities (+ the
log-sum-exp and the mass outside the top K) at every position of prompt ++ continuation, and
full f32 logits rows (smollm2: the last prompt position; tiny: every position). The layout is in
docs/ORACLE.md; MANIFEST lists the cases, meta.json the versions and statistics, and
smollm2-capital.txt the greedy continuation of "The capital of France is" as text.

Tests never import Python: this script is run by hand and its output committed.
"""
import argparse
import hashlib
import json
import os
import platform
import struct
import sys
import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, LlamaForCausalLM

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "oracle")
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TINY = os.path.join(ROOT, "tests", "fixtures", "tiny-llama-bf16")

MAGIC = b"RADORCL1"
VERSION = 1
K = 64          # top-K entries per position
GEN = 32        # greedy continuation length
THREADS = 1     # one thread: reproducible reductions, and no barrier stalls on a busy machine

MOBY_DICK = """\
Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my \
purse, and nothing particular to interest me on shore, I thought I would sail about a little and \
see the watery part of the world. It is a way I have of driving off the spleen and regulating the \
circulation. Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly \
November in my soul; whenever I find myself involuntarily pausing before coffin warehouses, and \
bringing up the rear of every funeral I meet; and especially whenever my hypos get such an upper \
hand of me, that it requires a strong moral principle to prevent me from deliberately stepping \
into the street, and methodically knocking people's hats off—then, I account it high time to get \
to sea as soon as I can. This is my substitute for pistol and ball. With a philosophical flourish \
Cato throws himself upon his sword; I quietly take to the ship. There is nothing surprising in \
this. If they but knew it, almost all men in their degree, some time or other, cherish very nearly \
the same feelings towards the ocean with me.

There now is your insular city of the Manhattoes, belted round by wharves as Indian isles by coral \
reefs—commerce surrounds it with her surf. Right and left, the streets take you waterward. Its \
extreme downtown is the battery, where that noble mole is washed by waves, and cooled by breezes, \
which a few hours previous were out of sight of land. Look at the crowds of water-gazers there.

Circumambulate the city of a dreamy Sabbath afternoon. Go from Corlears Hook to Coenties Slip, and \
from thence, by Whitehall, northward. What do you see?—Posted like silent sentinels all around the \
town, stand thousands upon thousands of mortal men fixed in ocean reveries. Some leaning against \
the spiles; some seated upon the pier-heads; some looking over the bulwarks of ships from China; \
some high aloft in the rigging, as if striving to get a still better seaward peep. But these are \
all landsmen; of week days pent up in lath and plaster—tied to counters, nailed to benches, \
clinched to desks. How then is this? Are the green fields gone? What do they here?

But look! here come more crowds, pacing straight for the water, and seemingly bound for a dive. \
Strange! Nothing will content them but the extremest limit of the land; loitering under the shady \
lee of yonder warehouses will not suffice. No. They must get just as nigh the water as they \
possibly can without falling in. And there they stand—miles of them—leagues. Inlanders all, they \
come from lanes and alleys, streets and avenues—north, east, south, and west. Yet here they all \
unite. Tell me, does the magnetic virtue of the needles of the compasses of all those ships \
attract them thither?

Once more. Say you are in the country; in some high land of lakes. Take almost any path you \
please, and ten to one it carries you down in a dale, and leaves you there by a pool in the \
stream. There is magic in it. Let the most absent-minded of men be plunged in his deepest \
reveries—stand that man on his legs, set his feet a-going, and he will infallibly lead you to \
water, if water there be in all that region. Should you ever be athirst in the great American \
desert, try this experiment, if your caravan happen to be supplied with a metaphysical professor. \
Yes, as every one knows, meditation and"""

# (case name, kind, text); kind "chat" is a list of messages put through the model's template.
SMOL_PROMPTS = [
    ("capital", "text", "The capital of France is"),
    ("code", "text", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
                     "        return n\n"),
    ("chat", "chat", [{"role": "system", "content": "You are a helpful assistant."},
                      {"role": "user", "content": "What is the boiling point of water at sea level, "
                                                  "in degrees Celsius?"}]),
    ("list", "text", "Here is a list of the planets of the solar system, in order from the Sun:\n"
                     "1. Mercury\n2. Venus\n3."),
    ("numeric", "text", "12 + 7 = 19\n35 + 48 = 83\n126 + 257 = 383\n1000 - 1 = 999\n64 * 2 ="),
    ("french", "text", "La Révolution française est une période de bouleversements politiques et "
                       "sociaux en France, qui"),
    ("japanese", "text", "日本の首都は東京です。日本で一番高い山は"),
    ("weekdays", "text", "The days of the week are Monday, Tuesday, Wednesday,"),
    ("long", "text", MOBY_DICK),
    ("one", "text", "Hello"),
]

# (case name, prompt length); ids drawn from a seeded generator over the whole vocabulary.
TINY_SEED = 7
TINY_PROMPTS = [("len1", 1), ("len6", 6), ("len40", 40), ("len150", 150)]
TINY_MIN_MARGIN = 0.05  # smallest top-1 minus top-2 logit gap allowed along a greedy continuation


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def topk_record(logits):
    """logits: [n, V] f32. Returns (lse f32[n], rest f32[n], ids i32[n,K], logprob f32[n,K]).

    Ordered by descending logit, ties by ascending id; lse and rest are computed in f64 (rest is
    summed directly over the tokens outside the top K, not as 1 - sum(top K))."""
    x = logits.astype(np.float64)
    n, v = x.shape
    m = x.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(x - m).sum(axis=1)))
    ids = np.empty((n, K), np.int32)
    lp = np.empty((n, K), np.float32)
    rest = np.empty(n, np.float64)
    neg = -logits.astype(np.float32)
    kth = np.partition(neg, K - 1, axis=1)[:, K - 1]  # minus the K-th largest logit
    for i in range(n):
        cand = np.nonzero(neg[i] <= kth[i])[0]  # the top K and anything tied with the K-th
        top = cand[np.lexsort((cand, neg[i, cand]))][:K]  # last key primary: -logit, then id
        ids[i] = top
        lp[i] = (x[i, top] - lse[i]).astype(np.float32)
        outside = np.ones(v, bool)
        outside[top] = False
        rest[i] = np.exp(x[i, outside] - lse[i]).sum()
    return lse.astype(np.float32), rest.astype(np.float32), ids, lp


@torch.no_grad()
def run_case(model, prompt_ids, n_gen=GEN):
    """Prefill the prompt (one forward), then n_gen (GEN) greedy steps through the KV cache.

    Returns (gen ids, logits [n_prompt + GEN - 1, V] f32: the prefill's rows, then each decode
    step's row, margins [GEN]: top-1 minus top-2 logit at each greedy choice)."""
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    out = model(input_ids=ids, use_cache=True)
    rows = [out.logits[0].float().numpy().copy()]
    past = out.past_key_values
    last = out.logits[0, -1].float()
    gen, margins = [], []
    for step in range(n_gen):
        t2 = torch.topk(last, 2)
        margins.append(float(t2.values[0] - t2.values[1]))
        nxt = int(torch.argmax(last))  # first maximum on ties
        gen.append(nxt)
        if step == n_gen - 1:
            break
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        last = out.logits[0, -1].float()
        rows.append(out.logits[0].float().numpy().copy())
    return gen, np.concatenate(rows, axis=0), margins


def write_case(path, vocab, prompt_ids, gen, logits, full_pos):
    n_prompt, n_gen = len(prompt_ids), len(gen)
    n_pos = n_prompt + n_gen - 1
    assert logits.shape == (n_pos, vocab), (logits.shape, n_pos, vocab)
    lse, rest, ids, lp = topk_record(logits)
    full = np.ascontiguousarray(logits[full_pos], dtype="<f4")
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<8I", VERSION, vocab, n_prompt, n_gen, K, n_pos, len(full_pos), 0))
        f.write(np.asarray(prompt_ids, "<i4").tobytes())
        f.write(np.asarray(gen, "<i4").tobytes())
        f.write(lse.astype("<f4").tobytes())
        f.write(rest.astype("<f4").tobytes())
        f.write(ids.astype("<i4").tobytes())
        f.write(lp.astype("<f4").tobytes())
        f.write(np.asarray(full_pos, "<u4").tobytes())
        f.write(full.tobytes())
    return rest


def plain(model, dtype, norm="LlamaRMSNorm", emb="Embedding"):
    """Refuse a model that is not plain torch layers in `dtype`: with the `kernels` package
    installed, transformers may keep GGUF weights packed or graft ggml's layer kernels on."""
    kinds = {(type(m).__name__, p.dtype) for m in model.modules() for p in m.parameters(recurse=False)}
    want = {("Linear", dtype), (emb, dtype), (norm, dtype)}
    assert kinds == want, f"not a plain {dtype} model: {sorted(map(str, kinds))}"
    assert model.config._attn_implementation == "eager"
    return model.eval()


def load_smollm2(dtype=torch.float32):
    folder, name = os.path.split(GGUF)
    return plain(AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=dtype, attn_implementation="eager",
        quantization_config=GgufConfig(dequantize=True)), dtype)


def load_tiny(dtype=torch.float32):
    return plain(LlamaForCausalLM.from_pretrained(TINY, dtype=dtype, attn_implementation="eager"), dtype)


# ---- the other families' real checkpoints (--family): their cases are added to MANIFEST and
# meta.json beside smollm2's and tiny's, which are left as they are ------------------------------

QWEN_PROMPTS = [
    ("capital", "text", "The capital of France is"),
    ("fib", "text", "def fibonacci(n):"),
    ("code", "text", SMOL_PROMPTS[1][2]),
    ("chat", "chat", [{"role": "user", "content": "Write a Python function that reverses a string."}]),
    ("chat-system", "chat", SMOL_PROMPTS[2][2]),
    ("list", "text", SMOL_PROMPTS[3][2]),
    ("numeric", "text", SMOL_PROMPTS[4][2]),
    ("french", "text", SMOL_PROMPTS[5][2]),
    ("japanese", "text", SMOL_PROMPTS[6][2]),
    ("long", "text", MOBY_DICK),
    ("one", "text", "Hello"),
]

GEMMA_PROMPTS = [
    ("capital", "text", "The capital of France is"),
    ("fib", "text", "def fibonacci(n):"),
    ("list", "text", SMOL_PROMPTS[3][2]),
    ("numeric", "text", SMOL_PROMPTS[4][2]),
    ("french", "text", SMOL_PROMPTS[5][2]),
    ("japanese", "text", SMOL_PROMPTS[6][2]),
    ("weekdays", "text", SMOL_PROMPTS[7][2]),
    ("long", "text", MOBY_DICK),  # past the 512-token window: the local layers forget its start
    ("one", "text", "Hello"),
]

FAMILIES = {
    # name: (GGUF under models/, the model's RMSNorm and embedding classes, prompts, EOS ids, BOS added)
    "qwen05": ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", ("Qwen2RMSNorm", "Embedding"), QWEN_PROMPTS,
               (151643, 151645), False),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", ("Gemma3RMSNorm", "Gemma3TextScaledWordEmbedding"), GEMMA_PROMPTS,
               (1, 106), True),
    # the 1.5B: the acceptance prompt alone, 64 tokens (make models fetches it; make test does not)
    "qwen15": ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", ("Qwen2RMSNorm", "Embedding"), [("fib", "text", "def fibonacci(n):")],
               (151643, 151645), False, 64),
}


TINY_QWEN3 = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3-bf16")
TINY_QWEN3_GGUF = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3.gguf")
TINY_QWEN3_SEED = 11
TINY_QWEN3_PROMPTS = [("len1", 1), ("len7", 7), ("len40", 40), ("len150", 150)]


TINY_QWEN3_FP8 = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3-fp8")
TINY_QWEN3_FP8_SEED = 13
TINY_QWEN3_FP8T = os.path.join(ROOT, "tests", "fixtures", "tiny-qwen3-fp8-tensor")  # --per-tensor
TINY_QWEN3_FP8T_SEED = 17


def gen_tiny_qwen3():
    """Writes qwen3-tiny-<case>.bin for scripts/make-tiny-qwen3.py's random Qwen3 (transformers'
    Qwen3ForCausalLM on the bf16 folder, widened to f32, f32 compute; full logits rows at every
    position) with tiny-llama's rule: seeded random prompts, redrawn until the greedy continuation
    has no near-tie. The GGUF twin is loaded by transformers too (its GGUF reader has no qwen3
    key_length, so with the folder's config) and must give the same logits bit for bit, so these
    goldens are both files'. Splices MANIFEST and meta.json."""
    from transformers import AutoConfig, Qwen3ForCausalLM
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    model = plain(Qwen3ForCausalLM.from_pretrained(TINY_QWEN3, dtype=torch.float32, attn_implementation="eager"),
                  torch.float32, "Qwen3RMSNorm")
    folder, fname = os.path.split(TINY_QWEN3_GGUF)
    twin = plain(AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=fname, config=AutoConfig.from_pretrained(TINY_QWEN3), dtype=torch.float32,
        attn_implementation="eager"), torch.float32, "Qwen3RMSNorm")
    assert model.config.head_dim * model.config.num_attention_heads != model.config.hidden_size
    gen_tiny_random("tiny-qwen3", "qwen3-tiny-", model, twin, TINY_QWEN3_SEED, {
        "source": [os.path.relpath(TINY_QWEN3, ROOT), os.path.relpath(TINY_QWEN3_GGUF, ROOT)],
        "sha256": {**{f: sha256(os.path.join(TINY_QWEN3, f)) for f in sorted(os.listdir(TINY_QWEN3))},
                   fname: sha256(TINY_QWEN3_GGUF)},
        "load": "Qwen3ForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation='eager'); the GGUF "
                "with AutoModelForCausalLM.from_pretrained(gguf_file=..., config=the folder's) gives equal logits",
        "weights": "bf16, widened to f32 exactly (the GGUF holds the same values in f32)", "compute": "f32"})


def gen_tiny_qwen3_fp8(per_tensor=False):
    """Writes qwen3fp8-tiny-<case>.bin for scripts/make-tiny-qwen3-fp8.py's block-scaled fp8 Qwen3
    (per_tensor: qwen3fp8t-tiny-<case>.bin for its --per-tensor twin, one 0-d scale a tensor):
    transformers' own fp8 loader (FineGrainedFP8, which on a machine without a GPU dequantises
    every linear to codes * scale in the dtype asked: f32 here) and f32 compute. The loaded weights
    are checked equal to codes.float() * scale per 128x128 block (or per tensor), the definition
    the kernels use."""
    from safetensors.torch import load_file
    folder = TINY_QWEN3_FP8T if per_tensor else TINY_QWEN3_FP8
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    model = plain(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager"),
                  torch.float32, "Qwen3RMSNorm")
    st = load_file(os.path.join(folder, "model.safetensors"))
    n_fp8 = 0
    for k, t in st.items():
        if t.dtype != torch.float8_e4m3fn:
            continue
        s = st[k + "_scale_inv"]
        assert (s.dim() == 0) == per_tensor, f"{k}_scale_inv has shape {list(s.shape)}"
        if not per_tensor:
            s = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:t.shape[0], :t.shape[1]]
        want = t.to(torch.float32) * s
        got = model.get_parameter(k)
        assert torch.equal(got.detach(), want), f"{k}: transformers' dequantised weight is not codes * scale"
        n_fp8 += 1
    assert n_fp8 == 7 * model.config.num_hidden_layers, n_fp8
    scales = ("one f32 scale for the whole tensor (weight_block_size null)" if per_tensor
              else "their 128x128 block's f32 scale")
    gen_tiny_random("tiny-qwen3-fp8" + ("-tensor" if per_tensor else ""), "qwen3fp8t-tiny-" if per_tensor else "qwen3fp8-tiny-",
                    model, None, TINY_QWEN3_FP8T_SEED if per_tensor else TINY_QWEN3_FP8_SEED, {
        "source": [os.path.relpath(folder, ROOT)],
        "sha256": {f: sha256(os.path.join(folder, f)) for f in sorted(os.listdir(folder))},
        "load": "AutoModelForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation='eager') "
                "(FineGrainedFP8: dequantised without a GPU)",
        "weights": f"fp8 e4m3 codes times {scales}, in f32 (checked against the file)",
        "compute": "f32"})


def gen_tiny_random(name, prefix, model, twin, seed, meta_model):
    """The cases of a random-weight model: seeded random prompts (TINY_QWEN3_PROMPTS' lengths),
    redrawn until the greedy continuation has no near-tie; full logits rows. A twin (the same
    weights in another file) must give the same logits bit for bit. Splices MANIFEST and meta.json."""
    vocab = model.config.vocab_size
    for f in os.listdir(OUT):
        if f.startswith(prefix):
            os.remove(os.path.join(OUT, f))
    meta = json.load(open(os.path.join(OUT, "meta.json"), encoding="utf-8"))
    meta["models"][name] = {**meta_model, "vocab": vocab,
                            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    meta["cases"] = [c for c in meta["cases"] if c["model"] != name]
    rows = [l for l in open(os.path.join(OUT, "MANIFEST"), encoding="utf-8") if l.split()[1:2] != [name]]
    rng = np.random.default_rng(seed)
    for case, n in TINY_QWEN3_PROMPTS:
        for draws in range(1, 1001):
            prompt_ids = [int(t) for t in rng.integers(0, vocab, n)]
            gen, logits, margins = run_case(model, prompt_ids)
            if min(margins) >= TINY_MIN_MARGIN:
                break
        else:
            raise SystemExit(f"{name} {case}: no prompt with greedy margins >= {TINY_MIN_MARGIN}")
        if twin is not None:
            with torch.no_grad():
                seq = torch.tensor([prompt_ids + gen[:-1]])
                a, b = model(input_ids=seq).logits[0], twin(input_ids=seq).logits[0]
            assert torch.equal(a, b), f"{case}: the twin's logits differ by {float((a - b).abs().max())}"
        fn = f"{prefix}{case}.bin"
        n_pos = n + GEN - 1
        rest = write_case(os.path.join(OUT, fn), vocab, prompt_ids, gen, logits, list(range(n_pos)))
        meta["cases"].append({
            "file": fn, "model": name, "case": case, "kind": "ids", "n_prompt": n, "n_gen": GEN, "draws": draws,
            "min_greedy_margin": min(margins), "rest_mass": {"mean": float(rest.mean()), "max": float(rest.max())}})
        rows.append(f"{fn} {name} {n} {GEN} {n_pos}\n")
        print(f"  {name} {case:7s} {n:4d} tokens  margin {min(margins):6.3f} ({draws} draws) -> {gen}")
    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.writelines(rows)
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    verify()


def gen_family(name):
    """Writes <name>-<case>.bin (no whole logits rows: a 150k vocabulary makes them 600 kB each;
    the top-K and the rest mass are what the tests score) and splices MANIFEST and meta.json."""
    fname, (norm, emb), prompts, eos_ids, add_bos = FAMILIES[name][:5]
    n_gen = FAMILIES[name][5] if len(FAMILIES[name]) > 5 else GEN
    path = os.path.join(ROOT, "models", fname)
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=fname)
    model = plain(AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=fname, dtype=torch.float32, attn_implementation="eager",
        quantization_config=GgufConfig(dequantize=True)), torch.float32, norm, emb)
    vocab = model.config.vocab_size
    print(f"{name} loaded ({time.time() - t0:.0f}s), vocab {vocab}")
    for f in os.listdir(OUT):
        if f.startswith(name + "-"):
            os.remove(os.path.join(OUT, f))
    meta = json.load(open(os.path.join(OUT, "meta.json"), encoding="utf-8"))
    meta["models"][name] = {
        "source": os.path.relpath(path, ROOT), "sha256": sha256(path),
        "load": "AutoModelForCausalLM.from_pretrained(models, gguf_file=..., dtype=float32, "
                "attn_implementation='eager', quantization_config=GgufConfig(dequantize=True))",
        "weights": "dequantised by transformers to f32", "compute": "f32", "vocab": vocab,
        "tokenizer": f"AutoTokenizer.from_pretrained(models, gguf_file=...), add_special_tokens {add_bos}",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    meta["cases"] = [c for c in meta["cases"] if c["model"] != name]
    rows = [l for l in open(os.path.join(OUT, "MANIFEST"), encoding="utf-8") if l.split()[1:2] != [name]]
    for case, kind, text in prompts:
        if kind == "chat":
            text = tok.apply_chat_template(text, tokenize=False, add_generation_prompt=True)
        prompt_ids = tok(text, add_special_tokens=add_bos)["input_ids"]
        assert tok.decode(prompt_ids, skip_special_tokens=add_bos) == text, case
        gen, logits, margins = run_case(model, prompt_ids, n_gen)
        n = len(prompt_ids)
        fn = f"{name}-{case}.bin"
        rest = write_case(os.path.join(OUT, fn), vocab, prompt_ids, gen, logits, [])
        cont = tok.decode(gen)
        eos = [i for i, t in enumerate(gen) if t in eos_ids]
        meta["cases"].append({
            "file": fn, "model": name, "case": case, "kind": kind, "prompt": text,
            "n_prompt": n, "n_gen": n_gen, "continuation": cont, "first_eos": eos[0] if eos else None,
            "min_greedy_margin": min(margins),
            "rest_mass": {"mean": float(rest.mean()), "median": float(np.median(rest)), "max": float(rest.max())}})
        rows.append(f"{fn} {name} {n} {n_gen} 0\n")
        print(f"  {case:11s} {n:4d} tokens  margin {min(margins):6.3f} -> {cont!r}  ({time.time() - t0:.0f}s)")
        if case in ("fib", "capital", "long"):  # the CLI acceptance: prompt and text, exact bytes, no newline added
            with open(os.path.join(OUT, f"{name}-{case}.txt"), "wb") as f:
                f.write(cont.encode("utf-8"))
            with open(os.path.join(OUT, f"{name}-{case}.prompt"), "wb") as f:
                f.write(text.encode("utf-8"))
    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.writelines(rows)
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    verify()


def original_style_tokenizer(tok):
    """The GGUF tokenizer with SmolLM2's own pre-tokenizer (digits split one by one before the
    byte-level split, as SmolLM2's tokenizer.json and llama.cpp's "smollm" pre-type do);
    transformers' GGUF loader has no split for pre-type "smollm" and uses plain ByteLevel."""
    from tokenizers import Tokenizer, pre_tokenizers
    t = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    return t


def kl_stats(ref_logits, our_logits):
    """Top-1 agreement, exact mean KL(p_ref || p_ours) and the top-K + rest bucket KL."""
    r = torch.log_softmax(torch.from_numpy(ref_logits).double(), -1)
    o = torch.log_softmax(torch.from_numpy(our_logits).double(), -1)
    kl = (r.exp() * (r - o)).sum(-1)
    top = torch.topk(r, K, dim=-1).indices
    pr, po = r.gather(-1, top), o.gather(-1, top)
    rr = (1 - pr.exp().sum(-1)).clamp_min(1e-30)
    ro = (1 - po.exp().sum(-1)).clamp_min(1e-30)
    kb = (pr.exp() * (pr - po)).sum(-1) + rr * (rr.log() - ro.log())
    agree = (r.argmax(-1) == o.argmax(-1)).double().mean()
    return float(agree), float(kl.mean()), float(kl.max()), float(kb.mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrate", action="store_true",
                    help="also score bf16-rounded weights and f64 compute against the f32 oracle")
    ap.add_argument("--verify", action="store_true", help="only read the fixtures back and check them")
    ap.add_argument("--calibrate-q8act", action="store_true",
                    help="only score activations quantised to q8 blocks (radiance --fast's arithmetic) against "
                         "the committed smollm2 files; records the result in meta.json's calibration")
    ap.add_argument("--family", choices=sorted(FAMILIES),
                    help="only (re)write this model's cases, splicing them into MANIFEST and meta.json")
    ap.add_argument("--tiny-qwen3", action="store_true",
                    help="only (re)write the random Qwen3's cases (scripts/make-tiny-qwen3.py), splicing them in")
    ap.add_argument("--tiny-qwen3-fp8", action="store_true",
                    help="only (re)write the random fp8 Qwen3's cases (scripts/make-tiny-qwen3-fp8.py), splicing them in")
    ap.add_argument("--tiny-qwen3-fp8-tensor", action="store_true",
                    help="only (re)write the per-tensor fp8 Qwen3's cases (make-tiny-qwen3-fp8.py --per-tensor)")
    args = ap.parse_args()
    if args.tiny_qwen3_fp8_tensor:
        return gen_tiny_qwen3_fp8(per_tensor=True)
    if args.tiny_qwen3:
        return gen_tiny_qwen3()
    if args.tiny_qwen3_fp8:
        return gen_tiny_qwen3_fp8()
    if args.family:
        return gen_family(args.family)
    if args.verify:
        return verify()
    if args.calibrate_q8act:
        return calibrate_q8act()

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith((".bin", ".txt")):
            os.remove(os.path.join(OUT, f))
    t0 = time.time()
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__,
                "platform": platform.platform(), "machine": platform.machine(),
                "torch_threads": THREADS}
    print("versions:", json.dumps(versions))
    meta = {"format": {"magic": MAGIC.decode(), "version": VERSION, "k": K, "gen": GEN},
            "versions": versions, "models": {}, "cases": []}
    manifest = []

    # ---- SmolLM2 --------------------------------------------------------------------------
    folder, name = os.path.split(GGUF)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    orig = original_style_tokenizer(tok)
    model = load_smollm2()
    vocab = model.config.vocab_size
    meta["models"]["smollm2"] = {
        "source": os.path.relpath(GGUF, ROOT), "sha256": sha256(GGUF),
        "load": "AutoModelForCausalLM.from_pretrained(models, gguf_file=..., dtype=float32, "
                "attn_implementation='eager', quantization_config=GgufConfig(dequantize=True))",
        "weights": "dequantised by transformers to f32", "compute": "f32", "vocab": vocab,
        "tokenizer": "AutoTokenizer.from_pretrained(models, gguf_file=...), add_bos false"}
    print(f"smollm2 loaded ({time.time() - t0:.0f}s)")
    runs = {}
    for case, kind, text in SMOL_PROMPTS:
        if kind == "chat":
            text = tok.apply_chat_template(text, tokenize=False, add_generation_prompt=True)
        prompt_ids = tok(text, add_special_tokens=False)["input_ids"]
        alt_ids = orig.encode(text, add_special_tokens=False).ids
        assert tok.decode(prompt_ids) == text, case
        gen, logits, margins = run_case(model, prompt_ids)
        n = len(prompt_ids)
        fn = f"smollm2-{case}.bin"
        rest = write_case(os.path.join(OUT, fn), vocab, prompt_ids, gen, logits, [n - 1])
        runs[case] = (prompt_ids, gen, logits)
        cont = tok.decode(gen)
        eos = [i for i, t in enumerate(gen) if t in (0, 2)]
        meta["cases"].append({
            "file": fn, "model": "smollm2", "case": case, "kind": kind, "prompt": text,
            "n_prompt": n, "n_gen": GEN, "continuation": cont, "first_eos": eos[0] if eos else None,
            "min_greedy_margin": min(margins),
            "rest_mass": {"mean": float(rest.mean()), "median": float(np.median(rest)),
                          "max": float(rest.max())},
            "original_pretokenizer_ids_match": alt_ids == prompt_ids})
        manifest.append((fn, "smollm2", n, GEN, 1))
        print(f"  {case:9s} {n:4d} tokens  margin {min(margins):6.3f}  rest mean {rest.mean():.4f}"
              f" max {rest.max():.4f}  {'' if alt_ids == prompt_ids else 'PRETOKENIZER DIFFERS '}"
              f"-> {cont!r}  ({time.time() - t0:.0f}s)")
        if case == "capital":  # exact bytes, no newline added
            for fn_txt, toks in (("smollm2-capital.txt", gen),
                                 ("smollm2-capital-to-eos.txt", gen[:eos[0]] if eos else gen)):
                with open(os.path.join(OUT, fn_txt), "wb") as f:
                    f.write(tok.decode(toks).encode("utf-8"))
    # where the GGUF tokenizer and SmolLM2's own pre-tokenizer part ways (not used as prompts)
    probes = ["a  5", "x² + y²", "Call 555 1234 now", "v1.2.3", "I have  3 cats"]
    meta["tokenizer_probe"] = [{"text": s, "gguf": tok(s, add_special_tokens=False)["input_ids"],
                                "smollm2_pretokenizer": orig.encode(s, add_special_tokens=False).ids}
                               for s in probes]
    if args.calibrate:
        meta["calibration"] = calibrate_smollm2(model, runs)
    del model

    # ---- tiny-llama-bf16 --------------------------------------------------------------------
    model = load_tiny()
    vocab = model.config.vocab_size
    meta["models"]["tiny-llama-bf16"] = {
        "source": os.path.relpath(TINY, ROOT),
        "sha256": {f: sha256(os.path.join(TINY, f)) for f in sorted(os.listdir(TINY))},
        "load": "LlamaForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation='eager')",
        "weights": "bf16, widened to f32 exactly", "compute": "f32", "vocab": vocab}
    rng = np.random.default_rng(TINY_SEED)
    for case, n in TINY_PROMPTS:
        # draw prompts until one's greedy continuation has no near-tie (a bf16-weight engine that
        # computes in f32 lands within ~1e-4 of the oracle; a 0.05 margin leaves room for more)
        for draws in range(1, 1001):
            prompt_ids = [int(t) for t in rng.integers(0, vocab, n)]
            gen, logits, margins = run_case(model, prompt_ids)
            if min(margins) >= TINY_MIN_MARGIN:
                break
        else:
            raise SystemExit(f"tiny {case}: no prompt with greedy margins >= {TINY_MIN_MARGIN}")
        fn = f"tiny-{case}.bin"
        n_pos = n + GEN - 1
        rest = write_case(os.path.join(OUT, fn), vocab, prompt_ids, gen, logits, list(range(n_pos)))
        meta["cases"].append({
            "file": fn, "model": "tiny-llama-bf16", "case": case, "kind": "ids", "n_prompt": n,
            "n_gen": GEN, "draws": draws, "min_greedy_margin": min(margins),
            "rest_mass": {"mean": float(rest.mean()), "max": float(rest.max())}})
        manifest.append((fn, "tiny-llama-bf16", n, GEN, n_pos))
        print(f"  tiny {case:7s} {n:4d} tokens  margin {min(margins):6.3f} ({draws} draws) -> {gen}")
    del model

    with open(os.path.join(OUT, "MANIFEST"), "w", encoding="utf-8") as f:
        f.write("# file model n_prompt n_gen n_full  (written by scripts/gen-oracle.py; "
                "format: docs/ORACLE.md)\n")
        for row in manifest:
            f.write(" ".join(str(x) for x in row) + "\n")
    with open(os.path.join(OUT, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{OUT}: {len(manifest)} cases, {total} bytes, {time.time() - t0:.0f}s")
    verify()
    if args.calibrate:
        calibrate_q8act()


def read_case(path):
    """Parses one case file from its bytes alone (the layout in docs/ORACLE.md)."""
    b = open(path, "rb").read()
    assert b[:8] == MAGIC, f"{path}: bad magic"
    version, vocab, n_prompt, n_gen, k, n_pos, n_full, flags = struct.unpack_from("<8I", b, 8)
    assert version == VERSION and flags == 0 and n_pos == n_prompt + n_gen - 1
    off = 40
    c = {"vocab": vocab, "n_prompt": n_prompt, "n_gen": n_gen, "k": k, "n_pos": n_pos}
    for key, dt, count in (("prompt", "<i4", n_prompt), ("gen", "<i4", n_gen),
                           ("lse", "<f4", n_pos), ("rest", "<f4", n_pos),
                           ("top_id", "<i4", n_pos * k), ("top_lp", "<f4", n_pos * k),
                           ("full_pos", "<u4", n_full), ("full", "<f4", n_full * vocab)):
        c[key] = np.frombuffer(b, dt, count, off)
        off += 4 * count
    assert off == len(b), f"{path}: {len(b)} bytes, layout says {off}"
    c["top_id"] = c["top_id"].reshape(n_pos, k)
    c["top_lp"] = c["top_lp"].reshape(n_pos, k)
    c["full"] = c["full"].reshape(n_full, vocab)
    return c


def verify():
    """Reads every case back and checks it against itself and MANIFEST."""
    rows = [l.split() for l in open(os.path.join(OUT, "MANIFEST"), encoding="utf-8")
            if not l.startswith("#")]
    for fn, model, n_prompt, n_gen, n_full in rows:
        c = read_case(os.path.join(OUT, fn))
        assert (c["n_prompt"], c["n_gen"], len(c["full_pos"])) == (int(n_prompt), int(n_gen),
                                                                    int(n_full)), fn
        ids, lp, v = c["top_id"], c["top_lp"], c["vocab"]
        assert ((ids >= 0) & (ids < v)).all() and all(len(set(r)) == c["k"] for r in ids), fn
        assert (np.diff(lp, axis=1) <= 0).all(), fn
        mass = np.exp(lp.astype(np.float64)).sum(1) + c["rest"]
        assert np.abs(mass - 1).max() < 1e-5, (fn, np.abs(mass - 1).max())
        seq = np.concatenate([c["prompt"], c["gen"]])
        assert ((seq >= 0) & (seq < v)).all(), fn
        # greedy: each generated token is the top-1 of the position before it
        assert (ids[c["n_prompt"] - 1:, 0] == c["gen"]).all(), fn
        for pos, row in zip(c["full_pos"], c["full"]):
            x = row.astype(np.float64)
            lse = x.max() + np.log(np.exp(x - x.max()).sum())
            assert abs(lse - c["lse"][pos]) < 1e-4, fn
            assert np.abs(x[ids[pos]] - lse - lp[pos]).max() < 1e-4, fn
            assert int(np.argmax(row)) == ids[pos, 0], fn
    print(f"verified {len(rows)} cases")


@torch.no_grad()
def calibrate_smollm2(model, runs):
    """How far two nearby computations land from the f32 oracle, by the tests' own measures
    (teacher-forced over each case's prompt ++ continuation): f64 compute (float noise of the
    oracle itself) and bf16-rounded weights computed in f32 (a bigger, known perturbation)."""
    res = {}

    def score(label, m, dtype):
        ag, kl, klmax, klb = [], [], [], []
        for case, (p, g, ref) in runs.items():
            ids = torch.tensor([p + g[:-1]])
            ours = m(input_ids=ids).logits[0].to(torch.float64).numpy()
            a, k, kmax, kb = kl_stats(ref.astype(np.float64), ours)
            w = ref.shape[0]
            ag.append((a, w)); kl.append((k, w)); klb.append((kb, w)); klmax.append(kmax)
        tot = sum(w for _, w in ag)
        r = {"top1_agreement": sum(a * w for a, w in ag) / tot,
             "mean_kl": sum(k * w for k, w in kl) / tot, "max_kl": max(klmax),
             "mean_kl_topk_rest": sum(k * w for k, w in klb) / tot}
        print(f"  calibrate {label}: {r}")
        res[label] = r

    m64 = load_smollm2(torch.float64)
    score("f64_compute", m64, torch.float64)
    del m64
    mb = load_smollm2()
    for p in mb.parameters():
        p.data = p.data.to(torch.bfloat16).to(torch.float32)
    score("bf16_weights_f32_compute", mb, torch.float32)
    return res


def q8_blocks(x, f16_scale):
    """x with every row quantised per 32-element block the way a q8-activation GEMM does
    (docs/OPS.md, "Quantised activations"): d = amax / 127, q = roundf(x / d) (half away from
    zero), x^ = q * d, with d kept in f32 (libref's q8act) or rounded to f16 (llama.cpp's q8_0 and
    q8_1). SmolLM2's GGUF is q4_1 and q8_0 only, so every block is 32 elements."""
    shape = x.shape
    b = x.reshape(-1, 32)
    d = b.abs().amax(-1, keepdim=True) / 127
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    v = b * inv
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)
    if f16_scale:
        d = d.to(torch.float16).to(torch.float32)
    return (q * d).reshape(shape)


@torch.no_grad()
def calibrate_q8act():
    """Scores a transformers run whose every Linear (the 210 q4_1 projections and the q8_0 tied
    head) sees its input quantised to q8 blocks, against the committed smollm2 files, by the
    tests' measures: teacher-forced top-1 agreement, top-64 + rest KL (as tests/runtime/oracle_test.c),
    the exact KL at the stored full rows, and greedy continuations identical to the oracle's.
    That is the arithmetic radiance --fast lets the quantised GEMMs use; its numbers are what the
    --fast bound in docs/ORACLE.md is judged against."""
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    model = load_smollm2()
    rows = [l.split() for l in open(os.path.join(OUT, "MANIFEST"), encoding="utf-8")
            if not l.startswith("#") and l.startswith("smollm2-")]
    res = {}
    for label, f16 in (("q8_activations_f32_scale", False), ("q8_activations_f16_scale", True)):
        hooks = [m.register_forward_pre_hook(lambda mod, args, f16=f16: (q8_blocks(args[0], f16),))
                 for m in model.modules() if isinstance(m, torch.nn.Linear)]
        n = agree = 0
        kl_sum, kl_max, full_kl, gen_same, gen_tok = 0.0, 0.0, [], 0, 0
        for fn, *_ in rows:
            c = read_case(os.path.join(OUT, fn))
            p, g = [int(t) for t in c["prompt"]], [int(t) for t in c["gen"]]
            lg = model(input_ids=torch.tensor([p + g[:-1]])).logits[0].to(torch.float64)
            lo = torch.log_softmax(lg, -1)
            ids = torch.from_numpy(c["top_id"].astype(np.int64))
            lp = torch.from_numpy(c["top_lp"].astype(np.float64))
            rest = torch.from_numpy(c["rest"].astype(np.float64))
            q = lo.gather(-1, ids)
            rest_o = (1 - q.exp().sum(-1)).clamp_min(1e-30)
            kl = (lp.exp() * (lp - q)).sum(-1) + torch.where(rest > 0, rest * (rest.clamp_min(1e-300).log() - rest_o.log()),
                                                            torch.zeros_like(rest))
            agree += int((lo.argmax(-1) == ids[:, 0]).sum())
            n += lo.shape[0]
            kl_sum += float(kl.sum())
            kl_max = max(kl_max, float(kl.max()))
            for pos, row in zip(c["full_pos"], c["full"]):
                r = torch.log_softmax(torch.from_numpy(row.astype(np.float64)), -1)
                full_kl.append(float((r.exp() * (r - lo[int(pos)])).sum()))
            gen, _, _ = run_case(model, p)
            k = next((i for i in range(GEN) if gen[i] != g[i]), GEN)
            gen_same += k == GEN
            gen_tok += k
        for h in hooks:
            h.remove()
        r = {"positions": n, "top1_agreement": agree / n, "mean_kl_topk_rest": kl_sum / n,
             "max_kl_topk_rest": kl_max, "mean_kl_full_rows": sum(full_kl) / len(full_kl),
             "greedy_identical": gen_same, "greedy_cases": len(rows), "greedy_tokens_before_difference": gen_tok}
        print(f"  calibrate {label}: {r}")
        res[label] = r
    path = os.path.join(OUT, "meta.json")
    with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    meta.setdefault("calibration", {}).update(res)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
