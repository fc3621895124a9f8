# tests/hostile/cases/load.py — the container and loading weights: checksums verified at load
# (--no-verify), .rad tables that lie (docs/FORMAT.md, "Checks a reader makes"), a vocabulary-only
# container, and a model file changed under a running server (docs/TOOLS.md, "A file that changes
# under the server"): with --mmap the server fails closed with exit 3, never a signal, never a
# 200 from changed bytes; the default copy and a rename over the path change nothing.
import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import time
import urllib.error
import urllib.request

_xxh = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
_xxh.XXH3_64bits.restype = ctypes.c_uint64
_xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b):
    return _xxh.XXH3_64bits(b, len(b))


def s(b):
    return struct.pack("<Q", len(b)) + b


def entry(name, offset=0, nbytes=8, pname=b"data", reserved=0):
    """A u8 tensor of nbytes elements in one plane of zeros."""
    return (s(name) + s(b"u8") + struct.pack("<IQ", 1, nbytes) + struct.pack("<I", 1) + s(pname) +
            struct.pack("<QQQIIQ", offset, nbytes, nbytes, 0, reserved, xxh3(b"\0" * nbytes)))


def rad(entries, count=None, table_extra=b"", data_bytes=None, tail=b"", flags=0):
    """A whole container: an empty META, TENS with the entries, zero data, `tail` after it."""
    table = struct.pack("<Q", len(entries) if count is None else count) + b"".join(entries) + table_extra
    hdr = b"META" + struct.pack("<IQQ", 0, 8, 0) + b"TENS" + struct.pack("<IQ", 0, len(table)) + table
    data_offset = (64 + len(hdr) + 7) & ~7
    if data_bytes is None:
        data_bytes = 8 * len(entries)
    pre = b"RADIANCE" + struct.pack("<IIQQQIIQQ", 1, 0, len(hdr), data_offset, data_bytes, 8, flags, xxh3(hdr), 0)
    return pre + hdr + b"\0" * (data_offset - 64 - len(hdr)) + b"\0" * data_bytes + tail


def writer(name, data):
    def setup(t):
        with open(os.path.join(t, name), "wb") as f:
            f.write(data() if callable(data) else data)
    return setup


def model_copy(t, name="copy.rad"):
    """A writable copy of the converted model with its times in the past (a write moves mtime)."""
    p = os.path.join(t, name)
    shutil.copyfile(os.environ["RAD_MODEL"], p)
    os.chmod(p, 0o644)
    os.utime(p, (1000000000, 1000000000))
    return p


def flipped(t):
    p = model_copy(t, "flip.rad")
    with open(p, "r+b") as f:  # the middle of a 98 MB file is inside a weight
        f.seek(os.path.getsize(p) // 2)
        c = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([c[0] ^ 1]))


def appended(t):
    with open(model_copy(t, "x.rad"), "ab") as f:
        f.write(b"\0" * 16)


def many(t):
    n = 200000
    es = [entry(b"blk.%d.w" % i, offset=8 * i) for i in range(n)]
    with open(os.path.join(t, "many.rad"), "wb") as f:
        f.write(rad(es))


def ids_on_stdout(t, p):
    toks = p.stdout.split()
    return None if toks and all(x.isdigit() for x in toks) else "no token ids on stdout: %r" % p.stdout[:200]


RADIANCE = ["{B}/radiance", "--threads", "2", "--model"]
CASES = [
    # class 3: a flipped weight byte is refused at load naming the tensor; --no-verify serves it
    dict(name="load-flipped-weight-refused", setup=flipped, argv=RADIANCE + ["{T}/flip.rad", "-p", "x", "-n", "1"],
         rc=1, stderr=r"flip\.rad: tensor '[^']+' plane 'data': checksum mismatch \(stored [0-9a-f]+, computed [0-9a-f]+\)"),
    dict(name="load-flipped-weight-refused-mmap", setup=flipped,
         argv=RADIANCE + ["{T}/flip.rad", "--mmap", "-p", "x", "-n", "1"],
         rc=1, stderr=r"flip\.rad: tensor '[^']+' plane 'data': checksum mismatch"),
    dict(name="load-flipped-weight-no-verify-serves", setup=flipped,
         argv=RADIANCE + ["{T}/flip.rad", "--no-verify", "-p", "x", "-n", "2", "--temp", "0"],
         rc=0, stderr=r"radiance: load .* s;"),
    dict(name="rad-info-check-flipped-weight", setup=flipped, argv=["{B}/rad-info", "--check", "{T}/flip.rad"],
         rc=1, one_line=False, stderr=r"flip\.rad: tensor '[^']+' plane 'data': checksum mismatch"),
    # class 9, .rad: tables that lie
    dict(name="rad-empty-tensor-name", setup=writer("x.rad", rad([entry(b"")])), argv=["{B}/rad-info", "{T}/x.rad"],
         rc=1, stderr=r"x\.rad: tensor table entry 0: tensor name is empty"),
    dict(name="rad-empty-tensor-name-radiance", setup=writer("x.rad", rad([entry(b"")])),
         argv=RADIANCE + ["{T}/x.rad", "-p", "x"], rc=1, stderr=r"x\.rad: tensor table entry 0: tensor name is empty"),
    dict(name="rad-leftover-table-bytes", setup=writer("x.rad", rad([entry(b"a")], table_extra=b"\0" * 8)),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: tensor table: 8 bytes left over after 1 tensors"),
    dict(name="rad-duplicate-tensor-name", setup=writer("x.rad", rad([entry(b"a"), entry(b"b", 8), entry(b"a", 16)])),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: tensor 'a' appears twice"),
    dict(name="rad-control-byte-in-name", setup=writer("x.rad", rad([entry(b"a\x1b[2Jb")])),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1,
         stderr=r"x\.rad: tensor table entry 0: tensor name holds control byte 0x1b at byte 1"),
    dict(name="rad-nul-in-name", setup=writer("x.rad", rad([entry(b"a\0b")])), argv=["{B}/rad-info", "{T}/x.rad"],
         rc=1, stderr=r"x\.rad: tensor name holds a NUL byte"),
    dict(name="rad-empty-plane-name", setup=writer("x.rad", rad([entry(b"a", pname=b"")])),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: tensor 'a': a plane name is empty"),
    dict(name="rad-plane-reserved-set", setup=writer("x.rad", rad([entry(b"a", reserved=7)])),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: tensor 'a' plane 'data': reserved field is 7, not 0"),
    dict(name="rad-prefix-flags-set", setup=writer("x.rad", rad([entry(b"a")], flags=2)),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: prefix flags is 2, not 0"),
    dict(name="rad-overlapping-planes", setup=writer("x.rad", rad([entry(b"a", 0, 16), entry(b"b", 8)], data_bytes=16)),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1,
         stderr=r"x\.rad: tensor 'a' plane 'data' and tensor 'b' plane 'data' overlap"),
    dict(name="rad-count-beyond-table", setup=writer("x.rad", rad([entry(b"a")], count=10 ** 12)),
         argv=["{B}/rad-info", "{T}/x.rad"], rc=1, stderr=r"x\.rad: tensor count 1000000000000 exceeds"),
    dict(name="rad-bytes-after-data-area", setup=appended, argv=["{B}/rad-info", "{T}/x.rad"],
         rc=1, stderr=r"x\.rad: 16 bytes after the data area"),
    dict(name="rad-200k-tensors-check-linear", setup=many, argv=["{B}/rad-info", "--check", "{T}/many.rad"],
         rc=0, timeout=20, one_line=False),
    # class 10: a vocabulary-only container
    dict(name="radiance-vocab-only-says-so",
         argv=["sh", "-c", "{B}/rad-convert {GGUF} --vocab-only -o {T}/v.rad && "
                           "exec {B}/radiance --threads 2 --model {T}/v.rad -p x"],
         rc=1, stderr=r"v\.rad: this container holds no weights \(vocabulary only\)"),
    dict(name="radiance-vocab-only-tokenize-works",
         argv=["sh", "-c", "{B}/rad-convert {GGUF} --vocab-only -o {T}/v.rad && "
                           "echo 'Hello world' | exec {B}/radiance --model {T}/v.rad --tokenize"],
         rc=0, check=ids_on_stdout),
]


# ---- a model file changed under a running server ---------------------------------------------

def post(port, body, timeout=60):
    """(status, body) of a completion; status None when the server is gone (it exited)."""
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as ex:
        return ex.code, ex.read()
    except (urllib.error.URLError, ConnectionError, OSError):
        return None, b""


def exits_3(proc, within=30):
    """The documented status of a server whose mapped model changed (never a signal)."""
    try:
        proc.wait(timeout=within)
    except Exception:
        return "still running %d s after the change was seen" % within
    if proc.returncode != 3:
        return "exit status %s, expected 3 (RAD_EXIT_MODEL_CHANGED)" % proc.returncode
    return None


REQ = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}


def refused_then_exit_3(change):
    def run(port, t, proc):
        st, body = post(port, REQ)
        if st != 200:
            return "before the change: %s %r" % (st, body[:200])
        change(os.path.join(t, "copy.rad"))
        st, body = post(port, REQ)
        if st == 200:
            return "served 200 from changed weights: %r" % body[:200]
        if st is not None and not (b"copy.rad: changed while mapped (--mmap)" in body):
            return "error does not name the file and the change: %s %r" % (st, body[:300])
        why = exits_3(proc)
        if why:
            return why
        log = open(os.path.join(t, "server.log"), "rb").read()
        return None if b"copy.rad: changed while mapped (--mmap)" in log else "no line in the log: %r" % log[-400:]
    return run


def truncate_half(p):
    os.truncate(p, os.path.getsize(p) // 2)


def overwrite_middle(p):
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) // 2)
        f.write(b"\x55" * 4096)


def rename_over(p):
    tmp = p + ".new"
    shutil.copyfile(os.environ["RAD_MODEL"], tmp)
    os.replace(tmp, p)


def still_serves(change):
    def run(port, t, proc):
        st, a = post(port, REQ)
        if st != 200:
            return "before the change: %s %r" % (st, a[:200])
        change(os.path.join(t, "copy.rad"))
        st, b = post(port, REQ)
        if st != 200:
            return "after the change: %s %r" % (st, b[:300])
        ta, tb = json.loads(a)["choices"][0]["text"], json.loads(b)["choices"][0]["text"]
        return None if ta == tb else "greedy text changed: %r -> %r" % (ta, tb)
    return run


def truncate_mid_stream(port, t, proc):
    """Truncated while a long stream runs: the stream ends without more text from changed bytes
    (an error event, or the connection closes when the guard exits), and the server exits 3."""
    body = dict(REQ, prompt="Once upon a time, in a land far away,", max_tokens=400, stream=True)
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    n, cut, err = 0, False, False
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: {") and b'"error"' in line:
                    err = True
                elif line.startswith(b"data: {"):
                    n += 1
                    if cut and n > cut_at + 2:  # one step may finish between the cut and the check
                        return "text kept coming after the truncation (%d chunks)" % n
                if n == 3 and not cut:
                    truncate_half(os.path.join(t, "copy.rad"))
                    cut, cut_at = True, n
    except Exception:
        pass  # the guard's _exit closes the connection
    if not cut:
        return "the stream ended before the truncation"
    return exits_3(proc)


def setup_copy(t):
    model_copy(t)


SERVER_CASES = [
    dict(name="mmap-truncated-in-place-fails-closed", args=["--mmap"], model="{T}/copy.rad", setup=setup_copy,
         run=refused_then_exit_3(truncate_half), exit=None, timeout=90),
    dict(name="mmap-overwritten-in-place-fails-closed", args=["--mmap"], model="{T}/copy.rad", setup=setup_copy,
         run=refused_then_exit_3(overwrite_middle), exit=None, timeout=90),
    dict(name="mmap-truncated-mid-stream-exits-3", args=["--mmap"], model="{T}/copy.rad", setup=setup_copy,
         run=truncate_mid_stream, exit=None, timeout=120),
    dict(name="mmap-renamed-over-keeps-serving", args=["--mmap"], model="{T}/copy.rad", setup=setup_copy,
         run=still_serves(rename_over), exit=0, timeout=90),
    dict(name="copy-truncated-in-place-keeps-serving", model="{T}/copy.rad", setup=setup_copy,
         run=still_serves(truncate_half), exit=0, timeout=90),
    dict(name="copy-overwritten-in-place-keeps-serving", model="{T}/copy.rad", setup=setup_copy,
         run=still_serves(overwrite_middle), exit=0, timeout=90),
]
