# tests/hostile/cases/server.py — the HTTP server's edges: slow clients (the header and body
# deadlines, the share of --max-conns that incomplete requests may hold), bytes in a URL that are
# not UTF-8, a long served name, numeric JSON fields out of range, fields that are not served,
# \u0000 in strings, hostile and heavy response_format schemas, signals (SIGHUP and SIGQUIT drain; a second signal cuts the drain), clients
# that reset mid-stream (SIGPIPE ignored). Plain Python 3, stdlib only; imported by run.py.
import json
import os
import select
import signal
import socket
import time

HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def raw(port, data, timeout=30):
    """Sends bytes, reads until the server closes; returns (status or None, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    finally:
        s.close()
    if not got.startswith(b"HTTP/1."):
        return None, got
    return int(got.split(b" ", 2)[1]), got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""


def post(port, path, body):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    st, b = raw(port, b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                      b"Connection: close\r\n\r\n%s" % (path.encode(), len(body), body))
    try:
        return st, json.loads(b)
    except ValueError:
        return st, b


def get(port, path):
    st, b = raw(port, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        return st, json.loads(b)
    except ValueError:
        return st, b


def is_error(st, body, status, param=None):
    """None when body is OpenAI's error shape with this status (and param), else why not."""
    if st != status or not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return "expected %d with an error object, got %r %r" % (status, st, body if isinstance(body, dict) else body[:200])
    msg = body["error"].get("message")
    if not isinstance(msg, str) or not msg or "\n" in msg:
        return "the message is not one line: %r" % (msg,)
    if param is not None and body["error"].get("param") != param:
        return "param %r (want %r): %r" % (body["error"].get("param"), param, msg)
    return None


def closed_by_server(s):
    """True once the server has closed s (nothing read, or a reset)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        return bool(r) and s.recv(65536) == b""
    except OSError:
        return True


def completion_ok(port):
    st, body = post(port, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 2, "temperature": 0})
    return None if st == 200 and body.get("choices") else "a real client: %r %r" % (st, body)


# --- slow clients -----------------------------------------------------------------------------------
def slowloris(port, T, proc):
    socks = []
    try:
        for _ in range(30):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(HEAD + b"X-Slow: ")
            socks.append(s)
        t0 = time.time()
        while sum(closed_by_server(s) for s in socks) < 15:  # the share: 15 of --max-conns 20
            if time.time() - t0 > 30:
                return "30 incomplete requests, --max-conns 20: only %d closed" % sum(closed_by_server(s) for s in socks)
            time.sleep(0.1)
        return completion_ok(port)
    finally:
        for s in socks:
            s.close()


def trickle_head(port, T, proc):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(HEAD + b"X-Slow: ")
    t0 = time.time()
    try:
        while time.time() - t0 < 30:
            if closed_by_server(s):
                return completion_ok(port)
            s.sendall(b"a")
            time.sleep(0.2)
    except OSError:
        return completion_ok(port)
    finally:
        s.close()
    return "a request head trickled a byte every 0.2 s for 30 s: never closed (--header-timeout 1)"


def trickle_body(port, T, proc):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(HEAD + b"Content-Length: 5000\r\n\r\n{\"prompt\": \"")
    got, t0 = b"", time.time()
    try:
        while time.time() - t0 < 30:
            r, _, _ = select.select([s], [], [], 0.2)
            if r:
                d = s.recv(65536)
                if not d:
                    break
                got += d
            else:
                s.sendall(b"a")
    except OSError:
        pass
    finally:
        s.close()
    if not got.startswith(b"HTTP/1.1 408 "):
        return "a body trickled for 30 s with --body-timeout 1: %r" % got[:200]
    why = is_error(408, json.loads(got.split(b"\r\n\r\n", 1)[1]), 408)
    return why or completion_ok(port)


# --- paths, names -----------------------------------------------------------------------------------
def bad_paths(port, T, proc):
    for p in (b"/%FF%FE", b"/he\xffalth", b"/v1/models/%C3%28", b"/v1/models/%0A%0Dx", b"/" + b"\x80" * 300,
              b"/v1/models/" + b"%E2%82" * 60):
        why = is_error(*get(port, p), 404)
        if why:
            return "GET %r: %s" % (p[:30], why)
    st, _ = raw(port, b"G\xffT /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    if not (st and 400 <= st < 500):
        return "a method that is not UTF-8: %r" % st
    return completion_ok(port)


def long_name(port, T, proc):
    name = b"m" * 200
    st, body = get(port, b"/v1/models/" + name)
    if st != 200 or body.get("id") != name.decode():
        return "GET /v1/models/<200 characters>: %r %r" % (st, body)
    return None


# --- JSON fields ------------------------------------------------------------------------------------
def spliced(field, raw_value, base=None):
    b = dict(base or {"prompt": "Hello", "max_tokens": 2, "temperature": 0})
    b.pop(field, None)
    return (json.dumps(b)[:-1] + ', "%s": %s}' % (field, raw_value)).encode()


def numbers(port, T, proc):
    for field, v in (("seed", "18446744073709551616"), ("seed", "-1"), ("seed", "1.5"), ("seed", "1e400"),
                     ("top_p", "1e-300"), ("n", "1e400"), ("max_tokens", "4294967296"), ("temperature", "-1e400"),
                     ("logit_bias", '{"5": 1e400}'), ("logit_bias", '{" 5": 1}'), ("repetition_penalty", "1e-300")):
        why = is_error(*post(port, "/v1/completions", spliced(field, v)), 400, field)
        if why:
            return "%s %s: %s" % (field, v, why)
    st, body = post(port, "/v1/completions", spliced("user", "1e400"))
    return None if st == 200 else "a huge number in an ignored field: %r %r" % (st, body)


def unserved(port, T, proc):
    for field, v in (("echo", True), ("best_of", 2), ("suffix", "x"), ("tools", [{"type": "function"}]),
                     ("response_format", {"type": "xml"}), ("ignore_eos", True)):
        why = is_error(*post(port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, field: v}), 400, field)
        if why:
            return "%s %r: %s" % (field, v, why)
    st, body = post(port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "echo": False, "best_of": 1, "suffix": ""})
    return None if st == 200 else "the off values: %r %r" % (st, body)


def nul(port, T, proc):
    st, body = post(port, "/tokenize", b'{"prompt": "a\\u0000b"}')
    if st != 200 or len(body.get("tokens", [])) < 3:
        return "/tokenize with \\u0000: %r %r" % (st, body)
    st, body = post(port, "/v1/completions", b'{"prompt": "a\\u0000b", "max_tokens": 2, "temperature": 0}')
    if st != 200:
        return "a completion prompt with \\u0000: %r %r" % (st, body)
    chat = b'{"messages": [{"role": "user", "content": "a\\u0000b"}], "max_tokens": 2}'
    why = is_error(*post(port, "/v1/chat/completions", chat), 400, "messages[0].content")
    if why:
        return "chat content with \\u0000: " + why
    return is_error(*post(port, "/v1/completions", b'{"prompt": "a", "stop": ["\\u0000"]}'), 400, "stop[0]")


# --- response_format and tools ---------------------------------------------------------------------
# Hostile schemas are refused naming their place (a catastrophic regex, nesting past 64, an enum
# past 10000 values, a recursion that cannot end); a heavy one that is served (an enum of 3000
# values, 100 object alternatives, n=4 at T=1) runs beside an ordinary request without starving it; tool
# calls with arguments that are not JSON are refused by name.
def schemas(port, T, proc):
    import threading
    chat = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "x"}]
    deep = {"type": "string"}
    for _ in range(100):
        deep = {"type": "array", "items": deep}
    rec = {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}},
           "$ref": "#/$defs/n"}
    for schema, param in (({"type": "string", "pattern": "^(a+)+$"}, "response_format.json_schema.schema.pattern"),
                          (deep, None), ({"enum": ["v%d" % i for i in range(10001)]}, "response_format.json_schema.schema.enum"),
                          (rec, None), ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
                                        "response_format.json_schema.schema.properties.a.minimum")):
        st, b = post(port, chat, {"messages": msgs, "max_tokens": 4,
                                  "response_format": {"type": "json_schema", "json_schema": {"name": "h", "schema": schema}}})
        why = is_error(st, b, 400, param)
        if why or not b["error"].get("param", "").startswith("response_format.json_schema.schema"):
            return "schema %.60s: %s" % (json.dumps(schema), why or b)
    st, b = post(port, chat, {"messages": msgs + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\": "}}]}], "max_tokens": 2})
    why = is_error(st, b, 400, "messages[1].tool_calls[0]")
    if why:
        return "arguments that are not JSON: %s" % why
    heavy = {"type": "object", "properties": {
        "word": {"type": "string", "enum": ["w%05d-%s" % (i, "x" * (i % 17)) for i in range(3000)]},
        "pick": {"anyOf": [{"type": "object", "properties": {"k%d" % i: {"type": "string"}}, "required": ["k%d" % i],
                            "additionalProperties": False} for i in range(100)]}},
        "required": ["word", "pick"], "additionalProperties": False}
    out = {}

    def run_heavy():  # a socket timeout of its own: the sanitizer build walks the vocabulary ~10x slower
        body = json.dumps({"messages": msgs, "max_tokens": 60, "temperature": 1, "n": 4, "seed": 1,
                           "response_format": {"type": "json_schema", "json_schema": {"name": "h", "schema": heavy}}}).encode()
        try:
            st, b = raw(port, b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s" % (chat.encode(), len(body), body), timeout=180)
            out["heavy"] = (st, json.loads(b))
        except (OSError, ValueError) as ex:
            out["heavy"] = (None, repr(ex))
    th = threading.Thread(target=run_heavy)
    th.start()
    time.sleep(0.5)
    t0 = time.time()
    why = completion_ok(port)
    dt = time.time() - t0
    th.join(200)
    if why:
        return "beside a heavy schema: %s" % why
    if dt > 60:
        return "an ordinary request took %.1f s beside a heavy schema" % dt
    st, b = out.get("heavy", (None, None))
    if st != 200:
        return "the heavy schema: %r %r" % (st, b)
    for ch in b["choices"]:
        if ch["finish_reason"] == "stop":
            v = json.loads(ch["message"]["content"])
            if set(v) != {"word", "pick"} or not v["word"].startswith("w"):
                return "the heavy schema's reply: %r" % (v,)
    return None


def kv_too_small(port, T, proc):
    st, body = post(port, "/v1/completions", {"prompt": "hello " * 100, "max_tokens": 4})
    return is_error(st, body, 400)  # never fits: not 429 ("try again")


# --- signals ----------------------------------------------------------------------------------------
def stream_in_flight(port, n=80):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    b = json.dumps({"prompt": "Count: 1, 2, 3, 4,", "max_tokens": n, "temperature": 0, "stream": True}).encode()
    s.sendall(HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
    got = b""
    while got.count(b"data:") < 2:
        d = s.recv(4096)
        if not d:
            raise AssertionError("the stream ended before two events: %r" % got)
        got += d
    return s, got


def drains_on(sig):
    def run(port, T, proc):
        s, got = stream_in_flight(port)
        proc.send_signal(sig)
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        try:
            rc = proc.wait(60)
        except Exception:
            return "no exit within 60 s of %s" % signal.Signals(sig).name
        if rc != 0:
            return "exit %r after %s" % (rc, signal.Signals(sig).name)
        if b"data: [DONE]" not in got or b'"finish_reason":"length"' not in got and b'"finish_reason":"stop"' not in got:
            return "%s: the stream in flight did not finish: %r" % (signal.Signals(sig).name, got[-300:])
        return None
    return run


def second_signal_cuts(port, T, proc):
    s, _ = stream_in_flight(port, n=400)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    proc.send_signal(signal.SIGHUP)
    try:
        rc = proc.wait(30)
    except Exception:
        return "a second signal (SIGHUP after SIGTERM) did not cut the 60 s drain"
    finally:
        s.close()
    return None if rc == 0 else "exit %r after the second signal" % rc


def resets(port, T, proc):
    with open("/proc/%d/status" % proc.pid) as f:
        ign = int([ln for ln in f if ln.startswith("SigIgn:")][0].split()[1], 16)
    if not ign & (1 << (signal.SIGPIPE - 1)):
        return "SIGPIPE is not ignored (SigIgn %x)" % ign
    for _ in range(10):
        s, _ = stream_in_flight(port, n=32)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    if proc.poll() is not None:
        return "the server died when clients reset their streams (%r)" % proc.returncode
    return completion_ok(port)


CASES = [
    dict(name="server-header-timeout-" + v, argv=["{B}/radiance", "--model", "{MODEL}", "--header-timeout", v], rc=2,
         stderr=r"--header-timeout", timeout=20) for v in ("nan", "-1", "1e9", "abc", "inf")
] + [
    dict(name="server-served-name-not-utf8", argv=["{B}/radiance", "--model", "{MODEL}", "--served-model-name",
                                                  os.fsdecode(b"a\xffb")], rc=2, stderr=r"--served-model-name.*UTF-8", timeout=20),
] + [
    dict(name="server-body-timeout-" + v, argv=["{B}/radiance", "--model", "{MODEL}", "--body-timeout", v], rc=2,
         stderr=r"--body-timeout", timeout=20) for v in ("nan", "-0.5", "")
]

SERVER_CASES = [
    dict(name="slowloris-30-vs-max-conns-20", args=["--max-conns", "20", "--header-timeout", "600"], run=slowloris,
         timeout=90, exit=0, quick=True),
    dict(name="header-trickle-cut", args=["--header-timeout", "1", "--idle-timeout", "0"], run=trickle_head, timeout=60,
         exit=0, quick=True),
    dict(name="body-trickle-408", args=["--body-timeout", "1", "--idle-timeout", "0"], run=trickle_body, timeout=60,
         exit=0, quick=True),
    dict(name="url-not-utf8-404", args=[], run=bad_paths, timeout=60, exit=0, quick=True),
    dict(name="model-id-200-chars", args=["--served-model-name", "m" * 200], run=long_name, timeout=30, exit=0, quick=False),
    dict(name="json-numbers-name-the-field", args=[], run=numbers, timeout=60, exit=0, quick=True),
    dict(name="json-unserved-fields", args=[], run=unserved, timeout=60, exit=0, quick=True),
    dict(name="json-nul-in-strings", args=[], run=nul, timeout=60, exit=0, quick=True),
    dict(name="json-schemas-hostile-and-heavy", args=[], run=schemas, timeout=240, exit=0, quick=True),
    dict(name="request-larger-than-kv-pool-400", args=["--kv-blocks", "4"], run=kv_too_small, timeout=30, exit=0, quick=False),
    dict(name="sighup-drains-a-stream", args=["--drain-timeout", "60"], run=drains_on(signal.SIGHUP), timeout=90,
         exit=None, quick=True),
    dict(name="sigquit-drains-a-stream", args=["--drain-timeout", "60"], run=drains_on(signal.SIGQUIT), timeout=90,
         exit=None, quick=False),
    dict(name="second-signal-cuts-the-drain", args=["--drain-timeout", "60"], run=second_signal_cuts, timeout=60,
         exit=None, quick=False),
    dict(name="clients-reset-mid-stream", args=[], run=resets, timeout=90, exit=0, quick=True),
]


# --default-max-tokens: a request that omits max_tokens generates at most N (both endpoints); one
# that gives max_tokens is not cut by it; a default past what the context leaves is cut to it,
# never a 400 for a limit the client did not ask for.
def _default_max_tokens(n):
    def run(port, T, proc):
        msgs = [{"role": "user", "content": "Write a long story about a dragon."}]
        for path, body in (("/v1/chat/completions", {"messages": msgs, "temperature": 0}),
                           ("/v1/completions", {"prompt": "Once upon a time", "temperature": 0})):
            st, b = post(port, path, body)
            if st != 200:
                return "%s without max_tokens: %s %r" % (path, st, b)
            got = b["usage"]["completion_tokens"]
            if got > n or (n <= 8 and (got != n or b["choices"][0]["finish_reason"] != "length")):
                return "%s without max_tokens: %d tokens (%s), want at most %d" % (path, got, b["choices"][0]["finish_reason"], n)
        if n <= 8:
            st, b = post(port, "/v1/completions", {"prompt": "Once upon a time", "temperature": 0, "max_tokens": n + 3})
            if st != 200 or b["usage"]["completion_tokens"] != n + 3:
                return "max_tokens %d given: %s %r" % (n + 3, st, b)
        return None
    return run


SERVER_CASES += [
    dict(name="server-default-max-tokens", args=["--default-max-tokens", "5"], run=_default_max_tokens(5), timeout=120),
    dict(name="server-default-max-tokens-past-the-context", args=["--default-max-tokens", "100000"],
         run=_default_max_tokens(512), timeout=300, quick=False),
]


# /v1/embeddings on an embedding model (all-MiniLM-L6-v2): malformed inputs of every shape are a
# 400 naming the field, the server keeps serving, and a good request after them is answered;
# many inputs in one request and many requests at once are batched and all answered.
def embeddings(port, T, proc):
    import threading
    path = "/v1/embeddings"
    bads = [({"input": None}, "input"), ({"input": 5}, "input"), ({"input": {"a": 1}}, "input"), ({"input": [1.5]}, "input"),
            ({"input": [[1, "x"]]}, "input"), ({"input": [-1]}, "input"), ({"input": [2 ** 40]}, "input"),
            ({"input": ["a", None]}, "input"), ({"input": "x " * 500}, "input"), ({"input": ["x"] * 2049}, "input"),
            ({"input": "x", "dimensions": 0}, "dimensions"), ({"input": "x", "dimensions": 10 ** 30}, "dimensions"),
            ({"input": "x", "dimensions": "384"}, "dimensions"), ({"input": "x", "encoding_format": None, "user": 5}, "user"),
            ({"input": "x", "encoding_format": ["float"]}, "encoding_format"), ({"input": "a\u0000b"}, None),
            ({"input": "x", "model": "other"}, "model")]
    for body, param in bads:
        st, b = post(port, path, body)
        if body.get("input") == "a\u0000b":  # a NUL inside text is a byte like any other: embedded
            if st != 200:
                return "NUL inside text: %s %r" % (st, b)
            continue
        want = 404 if param == "model" else 400
        why = is_error(st, b, want, param)
        if why:
            return "%.80s: %s" % (json.dumps(body), why)
    for junk in (b"", b"{", b"[]", b"null", b'{"input": "x"' + b" " * 10):
        st, b = post(port, path, junk)
        if is_error(st, b, 400):
            return "body %r: %s" % (junk[:20], is_error(st, b, 400))
    st, b = post(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    if is_error(st, b, 400, "model"):
        return "chat on an embedding model: %s" % is_error(st, b, 400, "model")
    out, lock = [], threading.Lock()

    def many(i):
        st, b = post(port, path, {"input": ["text %d, part %d" % (i, k) for k in range(40)]})
        with lock:
            out.append((st, b))
    ths = [threading.Thread(target=many, args=(i,)) for i in range(8)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for st, b in out:
        if st != 200 or len(b.get("data", [])) != 40 or [d["index"] for d in b["data"]] != list(range(40)):
            return "40 inputs x 8 requests: %s %.200r" % (st, b)
    st, b = post(port, path, {"input": "still serving", "encoding_format": "base64"})
    if st != 200 or not isinstance(b["data"][0]["embedding"], str):
        return "after the hostile ones: %s %.200r" % (st, b)
    return None


SERVER_CASES += [
    dict(name="embeddings-hostile-inputs-and-batches", model="{EMBED_MODEL}", args=[], run=embeddings, timeout=120, quick=True),
]
