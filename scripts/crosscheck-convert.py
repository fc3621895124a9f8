#!/usr/bin/env python3
"""Dev-time oracle check of rad-convert's GGUF import: the same model converted two ways must
hold the same weights.

  A: rad-convert GGUF --quant f32          (our reader, dequantiser and q/k un-interleave)
  B: rad-convert HF-folder --quant f32     (the folder transformers wrote from the same GGUF,
                                             scripts/gguf-to-hf.py: its loader un-permutes q/k)

B went through bf16, so each weight of A, rounded to bf16, must equal B exactly. The .rad files
are read here with a small independent parser of docs/FORMAT.md (numpy only).

    ~/venv/bin/python scripts/crosscheck-convert.py build/a.rad build/b.rad
"""
import struct
import sys

import numpy as np


def read_kv_value(b, o, t):
    scal = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    if t in scal:
        s = struct.calcsize(scal[t])
        return struct.unpack_from(scal[t], b, o)[0], o + s
    if t == 8:
        n = struct.unpack_from("<Q", b, o)[0]
        return b[o + 8:o + 8 + n].decode("utf-8", "replace"), o + 8 + n
    et, n = struct.unpack_from("<IQ", b, o)
    o += 12
    vals = []
    for _ in range(n):
        v, o = read_kv_value(b, o, et) if et != 9 else read_kv_value(b, o, 9)
        vals.append(v)
    return vals, o


def read_rad(path):
    b = open(path, "rb").read()
    assert b[:8] == b"RADIANCE", path
    major, minor, hbytes, data_off, data_bytes, align = struct.unpack_from("<IIQQQI", b, 8)
    o, end, tensors = 64, 64 + hbytes, {}
    while o < end:
        tag, _, ln = struct.unpack_from("<4sIQ", b, o)
        o += 16
        if tag == b"TENS":
            p = o
            (n,) = struct.unpack_from("<Q", b, p)
            p += 8
            for _ in range(n):
                name, p = read_kv_value(b, p, 8)
                enc, p = read_kv_value(b, p, 8)
                (rank,) = struct.unpack_from("<I", b, p)
                p += 4
                shape = struct.unpack_from(f"<{rank}Q", b, p)
                p += 8 * rank
                (npl,) = struct.unpack_from("<I", b, p)
                p += 4
                planes = []
                for _ in range(npl):
                    pn, p = read_kv_value(b, p, 8)
                    off, nb, stored, comp, _, ck = struct.unpack_from("<QQQIIQ", b, p)
                    p += 40
                    planes.append((pn, off, nb, comp))
                tensors[name] = (enc, shape, planes)
        o += ln
    out = {}
    for name, (enc, shape, planes) in tensors.items():
        _, off, nb, comp = planes[0]
        assert enc == "f32" and comp == 0, f"{path}: {name} is {enc}; convert with --quant f32"
        out[name] = np.frombuffer(b, dtype="<f4", count=nb // 4, offset=data_off + off).reshape(shape)
    return out


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even
    return (u.astype(np.uint32) << 16).view(np.float32)


a, b = read_rad(sys.argv[1]), read_rad(sys.argv[2])
bad = 0
for name, x in a.items():
    y = b.get(name)
    if y is None or y.shape != x.shape:
        print("MISMATCH", name, "missing or shape", None if y is None else y.shape, x.shape)
        bad += 1
        continue
    d = np.count_nonzero(to_bf16(x) != y)
    if d:
        bad += 1
        print(f"MISMATCH {name}: {d} of {x.size} values differ after bf16 rounding")
print(f"{len(a)} tensors compared, {bad} differ")
sys.exit(1 if bad else 0)
