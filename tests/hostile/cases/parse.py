# tests/hostile/cases/parse.py — the checkpoint readers and the converter's input: FIFOs where
# a file is named (as the source, inside a folder, as the archive), archive bombs (a zip, a
# tar.gz and a tar.zst, small on disk, huge when inflated), files with 100,000 keys or tensors (linear parsers:
# each well inside the time limit), and files that lie (an inf rope base, a block_count beside
# more layers of tensors, a wrong-typed key, an HF folder without a tokenizer). Every refusal is
# rc 1 and one line naming the file and the key, tensor or member. The inputs are made here.
import io
import json
import math
import os
import shutil
import struct
import tarfile
import zipfile

FIX = "tests/fixtures/hf/tiny-llama"  # relative to {ROOT}; the runner runs from the repository root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# ---- a tiny GGUF writer (v3, little-endian) -----------------------------------------------------

U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, typ, val):
    out = gstr(key) + struct.pack("<I", typ)
    if typ == U32:
        return out + struct.pack("<I", val)
    if typ == I32:
        return out + struct.pack("<i", val)
    if typ == F32:
        return out + struct.pack("<f", val)
    if typ == BOOL:
        return out + struct.pack("<B", val)
    if typ == STRING:
        return out + gstr(val)
    raise ValueError(typ)


def gguf(kvs, tensors=(), align=32):
    """kvs: encoded entries; tensors: (name, n_elems) f32 1-D, laid out one after another."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, off = [], 0
    for name, n in tensors:
        infos.append(gstr(name) + struct.pack("<I", 1) + struct.pack("<Q", n) + struct.pack("<I", 0) + struct.pack("<Q", off))
        off += -(-n * 4 // align) * align
    b = head + b"".join(infos)
    b += b"\0" * (-len(b) % align)
    return b + b"\0" * off


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def arch():
    return [kv("general.architecture", STRING, "llama")]


# ---- setups -------------------------------------------------------------------------------------

def fifo(name):
    return lambda t: os.mkfifo(os.path.join(t, name))


def hf_folder(t, fifo_member=None, drop=()):
    """A copy of the tiny-llama fixture in {T}/hf; one member replaced by a FIFO, some left out."""
    d = os.path.join(t, "hf")
    shutil.copytree(os.path.join(ROOT, FIX), d)
    for m in drop:
        os.unlink(os.path.join(d, m))
    if fifo_member:
        os.unlink(os.path.join(d, fifo_member))
        os.mkfifo(os.path.join(d, fifo_member))


def zip_bomb(t):
    # 16 MiB of zeros deflate to ~16 KB: its declared size alone is refused
    with zipfile.ZipFile(os.path.join(t, "bomb.zip"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", '{"model_type":"llama"}')
        z.writestr("model.safetensors", b"\0" * (16 << 20))


def tgz_bomb(t, members, each):
    with tarfile.open(os.path.join(t, "bomb.tar.gz"), "w:gz") as tf:
        for i in range(members):
            ti = tarfile.TarInfo("m/part%03d.bin" % i)
            ti.size = each
            tf.addfile(ti, io.BytesIO(b"\0" * each))


def zstd_frame(chunks):
    """A zstd frame by hand (the stdlib has no zstd): chunks are bytes (raw blocks) or
    (byte, count) runs (RLE blocks of up to 128 KiB), so gigabytes cost a few bytes each 128 KiB."""
    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")  # magic; no content size; window 128 KiB
    blocks = []
    for c in chunks:
        if isinstance(c, bytes):
            for i in range(0, len(c), 1 << 17):
                blocks.append((0, c[i:i + (1 << 17)]))
        else:
            b, n = c
            while n:
                k = min(n, 1 << 17)
                blocks.append((1, (k, b)))
                n -= k
    for i, (typ, body) in enumerate(blocks):
        last = i == len(blocks) - 1
        size = len(body) if typ == 0 else body[0]
        out += struct.pack("<I", last | typ << 1 | size << 3)[:3]
        out += body if typ == 0 else bytes([body[1]])
    return bytes(out)


def tzst_bomb(t, members, each):
    chunks = []
    for i in range(members):
        ti = tarfile.TarInfo("m/part%03d.bin" % i)
        ti.size = each
        chunks += [ti.tobuf(format=tarfile.USTAR_FORMAT), (0, each + (-each % 512))]
    chunks.append((0, 1024))  # the tar's end
    write(os.path.join(t, "bomb.tar.zst"), zstd_frame(chunks))


def many_keys_dup(t):
    kvs = arch() + [kv("x.k%d" % i, U32, i) for i in range(100000)] + [kv("x.k4242", U32, 1)]
    write(os.path.join(t, "many.gguf"), gguf(kvs))


def many_tensors_dup(t):
    ts = [("t.%d" % i, 8) for i in range(100000)] + [("t.777", 8)]
    write(os.path.join(t, "many.gguf"), gguf(arch(), ts))


def many_tensors_ok(t):
    write(os.path.join(t, "many.gguf"), gguf(arch(), [("t.%d" % i, 8) for i in range(100000)]))


def st_many_meta_dup(t):
    meta = ",".join('"k%d":"v%d"' % (i, i) for i in range(100000))
    h = ('{"__metadata__":{%s,"k4242":"again"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' % meta).encode()
    write(os.path.join(t, "many.safetensors"), struct.pack("<Q", len(h)) + h + b"\0" * 4)


def hf_many_config_keys(t):
    d = os.path.join(t, "hf")
    os.mkdir(d)
    cfg = {"model_type": "llama", "num_hidden_layers": 2}
    cfg.update({"x_%d" % i: i for i in range(100000)})
    write(os.path.join(d, "config.json"), json.dumps(cfg).encode())


def lie(entries, tensors=()):
    return lambda t: write(os.path.join(t, "x.gguf"), gguf(arch() + entries, tensors))


def real_gguf_block_count(t, n):
    """The default model with llama.block_count (30) rewritten to n, in place in a copy."""
    src = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    data = bytearray(open(src, "rb").read())
    key = gstr("llama.block_count") + struct.pack("<I", U32)
    at = data.find(key)
    assert at > 0, "llama.block_count not found"
    struct.pack_into("<I", data, at + len(key), n)
    write(os.path.join(t, "x.gguf"), bytes(data))


def ls_empty(t, proc):
    left = [f for f in os.listdir(t) if f.startswith("out.rad")]
    return "left behind: %s" % left if left else None


# ---- cases --------------------------------------------------------------------------------------

CASES = [
    # inputs that never end: refused at once, never opened for a blocking read
    dict(name="parse-rad-info-fifo-gguf", setup=fifo("x.gguf"), argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: not a regular file"),
    dict(name="parse-rad-convert-fifo-src", setup=fifo("x.gguf"), argv=["{B}/rad-convert", "{T}/x.gguf", "-o", "{T}/out.rad"],
         rc=1, stderr=r"x\.gguf: not a regular file", no_files=["{T}/out.rad*"]),
    dict(name="parse-rad-info-fifo-archive", setup=fifo("x.tar.zst"), argv=["{B}/rad-info", "{T}/x.tar.zst"], rc=1,
         stderr=r"x\.tar\.zst: not a regular file"),
    dict(name="parse-rad-info-fifo-hf-config", setup=lambda t: hf_folder(t, "config.json"), argv=["{B}/rad-info", "{T}/hf"],
         rc=1, stderr=r"hf/config\.json: not a regular file"),
    dict(name="parse-rad-convert-fifo-hf-tokenizer", setup=lambda t: hf_folder(t, "tokenizer.json"),
         argv=["{B}/rad-convert", "{T}/hf", "-o", "{T}/out.rad"], rc=1, stderr=r"hf/tokenizer\.json: not a regular file",
         no_files=["{T}/out.rad*"]),
    dict(name="parse-rad-convert-fifo-hf-shard", setup=lambda t: hf_folder(t, "model-00002-of-00002.safetensors"),
         argv=["{B}/rad-convert", "{T}/hf", "-o", "{T}/out.rad"], rc=1,
         stderr=r"hf/model-00002-of-00002\.safetensors: not a regular file", no_files=["{T}/out.rad*"]),

    # archive bombs: small on disk, refused by name before they inflate
    dict(name="parse-zip-bomb", setup=zip_bomb, argv=["{B}/rad-info", "{T}/bomb.zip"], rc=1,
         stderr=r"bomb\.zip:model\.safetensors: declares 16777216 bytes, more than 200 times"),
    dict(name="parse-rad-convert-zip-bomb", setup=zip_bomb, argv=["{B}/rad-convert", "{T}/bomb.zip", "-o", "{T}/out.rad"],
         rc=1, stderr=r"bomb\.zip:model\.safetensors: declares", no_files=["{T}/out.rad*"]),
    dict(name="parse-tgz-bomb-one-member", setup=lambda t: tgz_bomb(t, 1, 64 << 20), argv=["{B}/rad-info", "{T}/bomb.tar.gz"],
         rc=1, stderr=r"bomb\.tar\.gz:m/part000\.bin: declares 67108864 bytes"),
    dict(name="parse-tgz-bomb-many-members", setup=lambda t: tgz_bomb(t, 40, 1 << 20), argv=["{B}/rad-info", "{T}/bomb.tar.gz"],
         rc=1, stderr=r"bomb\.tar\.gz: inflates to more than 200 times its size"),

    dict(name="parse-tzst-bomb-one-member", setup=lambda t: tzst_bomb(t, 1, 4 << 30), argv=["{B}/rad-info", "{T}/bomb.tar.zst"],
         rc=1, stderr=r"bomb\.tar\.zst:m/part000\.bin: declares 4294967296 bytes, more than 200 times"),
    dict(name="parse-tzst-bomb-many-members", setup=lambda t: tzst_bomb(t, 64, 1 << 20),
         argv=["{B}/rad-convert", "{T}/bomb.tar.zst", "-o", "{T}/out.rad"], rc=1,
         stderr=r"bomb\.tar\.zst: inflates to more than 200 times its size", no_files=["{T}/out.rad*"]),

    # 100,000 keys or tensors: linear (they were quadratic), and a duplicate at the end is still found
    dict(name="parse-gguf-100k-keys-dup", setup=many_keys_dup, argv=["{B}/rad-info", "{T}/many.gguf"], rc=1,
         stderr=r"many\.gguf: metadata key 'x\.k4242' appears twice"),
    dict(name="parse-gguf-100k-tensors-dup", setup=many_tensors_dup, argv=["{B}/rad-info", "{T}/many.gguf"], rc=1,
         stderr=r"many\.gguf: tensor 't\.777' appears twice"),
    dict(name="parse-gguf-100k-tensors", setup=many_tensors_ok, argv=["{B}/rad-info", "{T}/many.gguf"], rc=0,
         check=lambda t, p: None if b"100000" in p.stdout else "rad-info does not report 100000 tensors"),
    dict(name="parse-safetensors-100k-metadata-dup", setup=st_many_meta_dup, argv=["{B}/rad-info", "{T}/many.safetensors"],
         rc=1, stderr=r"many\.safetensors: header JSON: duplicate object key"),
    dict(name="parse-hf-100k-config-keys", setup=hf_many_config_keys, argv=["{B}/rad-info", "{T}/hf"], rc=0),

    # files that lie: named, never defaulted
    dict(name="parse-gguf-rope-base-inf", setup=lie([kv("llama.rope.freq_base", F32, math.inf)]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: key 'llama\.rope\.freq_base': inf is not a finite number"),
    dict(name="parse-gguf-rope-base-nan", setup=lie([kv("llama.rope.freq_base", F32, math.nan)]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: key 'llama\.rope\.freq_base': -?nan is not a finite number"),
    dict(name="parse-gguf-eps-zero", setup=lie([kv("llama.attention.layer_norm_rms_epsilon", F32, 0.0)]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: key 'llama\.attention\.layer_norm_rms_epsilon': 0 is not a finite number in \(0, 1\]"),
    dict(name="parse-gguf-block-count-string", setup=lie([kv("llama.block_count", STRING, "30")]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: key 'llama\.block_count' is a string, expected an integer"),
    dict(name="parse-gguf-block-count-negative", setup=lie([kv("llama.block_count", I32, -1)]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1, stderr=r"x\.gguf: key 'llama\.block_count': -1 is out of range"),
    dict(name="parse-gguf-block-count-lie",
         setup=lie([kv("llama.block_count", U32, 1)], [("blk.0.attn_norm.weight", 8), ("blk.1.attn_norm.weight", 8)]),
         argv=["{B}/rad-info", "{T}/x.gguf"], rc=1,
         stderr=r"x\.gguf: tensor 'blk\.1\.attn_norm\.weight' is in layer 1, but key 'llama\.block_count' says 1 layer"),
    dict(name="parse-rad-convert-real-block-count-1", setup=lambda t: real_gguf_block_count(t, 1),
         argv=["{B}/rad-convert", "{T}/x.gguf", "-o", "{T}/out.rad"], rc=1,
         stderr=r"x\.gguf: tensor 'blk\.\d+\..*' is in layer \d+, but key 'llama\.block_count' says 1 layer",
         no_files=["{T}/out.rad*"], timeout=60),
    dict(name="parse-rad-convert-real-block-count-31", setup=lambda t: real_gguf_block_count(t, 31),
         argv=["{B}/rad-convert", "{T}/x.gguf", "-o", "{T}/out.rad"], rc=1,
         stderr=r"x\.gguf: key 'llama\.block_count' says 31 layers, but the tensors stop at layer 29",
         no_files=["{T}/out.rad*"], timeout=60),
    dict(name="parse-rad-convert-hf-no-tokenizer", setup=lambda t: hf_folder(t, None, ("tokenizer.json", "tokenizer_config.json")),
         argv=["{B}/rad-convert", "{T}/hf", "-o", "{T}/out.rad"], rc=1, stderr=r"hf: holds no tokenizer",
         no_files=["{T}/out.rad*"]),
    dict(name="parse-rad-convert-hf-no-tokenizer-opt-out",
         setup=lambda t: hf_folder(t, None, ("tokenizer.json", "tokenizer_config.json")),
         argv=["{B}/rad-convert", "{T}/hf", "--no-tokenizer", "-o", "{T}/out.rad"], rc=0),
]


# ---- a tokenizer.json that asks for what the tokenizer does not implement ------------------------
# (an unknown pre-tokenizer or decoder, a wrong-typed field, a special token outside the vocabulary):
# refused by name, never tokenised some other way without a word.

def hf_tok_edit(edit, name="tokenizer.json"):
    def setup(t):
        hf_folder(t)
        p = os.path.join(t, "hf", name)
        with open(p) as f:
            j = json.load(f)
        edit(j)
        with open(p, "w") as f:
            json.dump(j, f)
    return setup


def _set(path, value):
    def edit(j):
        o = j
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return edit


_TOKJSON = [
    ("pre-tokenizer-unknown", _set(["pre_tokenizer"], {"type": "Whitespace"}),
     r"tokenizer\.json: pre_tokenizer 'Whitespace' is not implemented"),
    ("pre-tokenizer-in-sequence-unknown", _set(["pre_tokenizer", "pretokenizers", 0], {"type": "BertPreTokenizer"}),
     r"tokenizer\.json: pre_tokenizer\.pretokenizers\[0\] 'BertPreTokenizer' is not implemented"),
    ("pre-tokenizer-type-number", _set(["pre_tokenizer", "type"], 7),
     r"tokenizer\.json: field 'pre_tokenizer\.type': expected string, got"),
    ("pre-tokenizer-use-regex-string", _set(["pre_tokenizer", "pretokenizers", 1, "use_regex"], "yes"),
     r"tokenizer\.json: field 'pre_tokenizer\.pretokenizers\[1\]\.use_regex': expected boolean"),
    ("decoder-unknown", _set(["decoder"], {"type": "CTC"}), r"tokenizer\.json: decoder 'CTC' is not implemented"),
]
CASES += [
    dict(name="parse-hf-tokenizer-" + slug, setup=hf_tok_edit(edit), argv=["{B}/rad-info", "{T}/hf"], rc=1, stderr=pat)
    for slug, edit, pat in _TOKJSON
]
CASES += [
    dict(name="parse-hf-tokenizer-config-eos-not-in-vocab", setup=hf_tok_edit(_set(["eos_token"], "<no such token>"),
                                                                             "tokenizer_config.json"),
         argv=["{B}/rad-convert", "{T}/hf", "-o", "{T}/out.rad"], rc=1, no_files=["{T}/out.rad*"],
         stderr=r"tokenizer_config\.json: eos_token '<no such token>' is not a token of the vocabulary"),
]
CASES += [
    dict(name="parse-hf-config-architectures-" + slug, setup=hf_tok_edit(_set(["architectures"], v), "config.json"),
         argv=["{B}/rad-convert", "{T}/hf", "--plan-only"], rc=1,
         stderr=r"config\.json field 'architectures': expected a non-empty array of strings")
    for slug, v in (("string", "LlamaForCausalLM"), ("empty", []), ("numbers", [1, 2]))
]


# ---- a name-map entry of more than four sources ---------------------------------------------------
# (test-plugins/arch_concat.so: "w" is a CONCAT of p0..p5): planned, not a fifth source reported
# as a missing tensor.
def concat6(t):
    write(os.path.join(t, "c.gguf"), gguf([kv("general.architecture", STRING, "concat_test")],
                                          [("p%d" % i, 4) for i in range(6)]))
    os.makedirs(os.path.join(t, "p"))
    shutil.copy(os.path.join(os.environ["RAD_B"], "test-plugins", "arch_concat.so"), os.path.join(t, "p"))


CASES += [
    dict(name="parse-rad-convert-concat-of-six", setup=concat6, rc=0,
         argv=["{B}/rad-convert", "{T}/c.gguf", "--plan-only", "-v", "--no-tokenizer", "--plugin-dir", "{T}/p"],
         check=lambda t, p: None if b" concat " in p.stdout and b"plan: 1 tensors, 96 bytes" in p.stdout
         else "no plan for 'w': %r" % p.stdout[-300:]),
]


# ---- a block-scaled fp8 checkpoint that lies (tests/fixtures/tiny-qwen3-fp8): each refused by name,
# at read, before a weight is decoded with another weight's scales -----------------------------------

FP8 = "tests/fixtures/tiny-qwen3-fp8"


def fp8_folder(header_edit=None, config_edit=None, src=FP8):
    """A copy of the fp8 fixture (src) in {T}/q; the safetensors header's JSON text and config.json
    edited (same length for the header, so the offsets stay valid)."""
    def setup(t):
        d = os.path.join(t, "q")
        shutil.copytree(os.path.join(ROOT, src), d)
        if header_edit:
            p = os.path.join(d, "model.safetensors")
            with open(p, "rb") as f:
                b = bytearray(f.read())
            n = struct.unpack("<Q", b[:8])[0]
            h = header_edit(b[8:8 + n].decode())
            assert len(h) == n
            b[8:8 + n] = h.encode()
            with open(p, "wb") as f:
                f.write(b)
        if config_edit:
            p = os.path.join(d, "config.json")
            with open(p) as f:
                j = json.load(f)
            config_edit(j["quantization_config"])
            with open(p, "w") as f:
                json.dump(j, f)
    return setup


def _qc(key, value):
    def edit(q):
        if value is None:
            q.pop(key, None)
        else:
            q[key] = value
    return edit


CASES += [
    dict(name="parse-fp8-scale-grid-transposed",
         setup=fp8_folder(lambda h: h.replace('"model.layers.0.mlp.gate_proj.weight_scale_inv":{"dtype":"F32","shape":[3,2]',
                                              '"model.layers.0.mlp.gate_proj.weight_scale_inv":{"dtype":"F32","shape":[2,3]')),
         argv=["{B}/rad-convert", "--no-tokenizer", "{T}/q", "-o", "{T}/out.rad"], rc=1,
         stderr=r"q: tensor 'model\.layers\.0\.mlp\.gate_proj\.weight_scale_inv' is not \[3, 2\], one scale per 128x128 block",
         no_files=["{T}/out.rad*"]),
    dict(name="parse-fp8-scale-without-weight",
         setup=fp8_folder(lambda h: h.replace('"model.layers.1.mlp.up_proj.weight"', '"model.layers.1.mlp.up_prox.weight"')),
         argv=["{B}/rad-info", "{T}/q"], rc=1,
         stderr=r"q: tensor 'model\.layers\.1\.mlp\.up_proj\.weight_scale_inv' scales a weight 'model\.layers\.1\.mlp\.up_proj\.weight' that is not there"),
    dict(name="parse-fp8-static-activations", setup=fp8_folder(config_edit=_qc("activation_scheme", "static")),
         argv=["{B}/radiance", "--model", "{T}/q", "--ids", "1,2", "-n", "1"], rc=1,
         stderr=r"q: quantization_config\.activation_scheme 'static': only 'dynamic' is read"),
    dict(name="parse-fp8-block-scales-without-block-size", setup=fp8_folder(config_edit=_qc("weight_block_size", None)),
         argv=["{B}/rad-convert", "--no-tokenizer", "{T}/q", "-o", "{T}/out.rad"], rc=1,
         stderr=r"q: tensor 'model\.layers\.\d\.[a-z_.]+\.weight_scale_inv' is not one scale: with no "
                r"quantization_config\.weight_block_size", no_files=["{T}/out.rad*"]),
    dict(name="parse-fp8-per-tensor-scale-under-a-block-size",
         setup=fp8_folder(config_edit=_qc("weight_block_size", [128, 128]), src=FP8 + "-tensor"),
         argv=["{B}/rad-convert", "--no-tokenizer", "{T}/q", "-o", "{T}/out.rad"], rc=1,
         stderr=r"q: tensor 'model\.layers\.\d\.[a-z_.]+\.weight_scale_inv' is not \[\d, \d\], one scale per 128x128 block",
         no_files=["{T}/out.rad*"]),
    # a weight whose scale is under another name would be served as its bare codes
    dict(name="parse-fp8-weight-without-scale",
         setup=fp8_folder(lambda h: h.replace('"model.layers.1.mlp.up_proj.weight_scale_inv"', '"model.layers.1.mlp.up_proj.weight_scale_inx"')),
         argv=["{B}/rad-convert", "--no-tokenizer", "--drop-unclaimed", "{T}/q", "-o", "{T}/out.rad"], rc=1,
         stderr=r"q: tensor 'model\.layers\.1\.mlp\.up_proj\.weight' is F8_E4M3 with no "
                r"'model\.layers\.1\.mlp\.up_proj\.weight_scale_inv' beside it", no_files=["{T}/out.rad*"]),
    dict(name="parse-fp8-requantise", setup=fp8_folder(),
         argv=["{B}/rad-convert", "--no-tokenizer", "--quant", "q8_0", "{T}/q", "-o", "{T}/out.rad"], rc=1,
         stderr=r"--quant: weight 'blk\.0\.attn_q\.weight' is block-scaled f8_e4m3", no_files=["{T}/out.rad*"]),
]
