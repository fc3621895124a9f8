"""Shared helpers for the end-to-end suites (tests/e2e/run.sh sets the environment).

Environment (run.sh sets it; a hand run against a server started by hand may too):
  E2E_URL         the server's base URL, e.g. http://127.0.0.1:8123
  E2E_SERVER_PID  its process id (a test that sees it gone fails with its log's tail)
  E2E_SERVER_LOG  its stderr
  E2E_BIN         the radiance binary (suites that start servers of their own use it)
  E2E_MODEL_FILE  the .rad container the server serves
  E2E_CTX         the context the server was started with (--ctx)
  E2E_MAX_SEQS    its --max-seqs
  E2E_QUICK       1: fewer tokens and requests (the sanitizer build)
  E2E_LOGDIR      where servers started by the suites write their stderr
"""
import http.client as httpclient
import json
import math
import os
import re
import signal
import socket
import subprocess
import time
import unittest

import openai

URL = os.environ.get("E2E_URL", "http://127.0.0.1:8080")
_hp = URL.split("://", 1)[1].rstrip("/")
HOST, PORT = _hp.rsplit(":", 1)[0], int(_hp.rsplit(":", 1)[1])
QUICK = os.environ.get("E2E_QUICK", "0") == "1"
CTX = int(os.environ.get("E2E_CTX", "512"))
MAX_SEQS = int(os.environ.get("E2E_MAX_SEQS", "16"))
BIN = os.environ.get("E2E_BIN", "build/radiance")
MODEL_FILE = os.environ.get("E2E_MODEL_FILE", "build/e2e/smollm2.rad")
LOGDIR = os.environ.get("E2E_LOGDIR", "build/e2e")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the sanitizer build is several times slower: generous timeouts, fewer tokens
TIMEOUT = 600.0 if QUICK else 180.0
NTOK = 8 if QUICK else 24


_dead = []


def server_alive_or_fail(tc=None):
    pid = os.environ.get("E2E_SERVER_PID")
    if not pid:
        return
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        _dead.append(pid)
        tail = ""
        log = os.environ.get("E2E_SERVER_LOG")
        if log and os.path.exists(log):
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-30:])
        msg = "the server (pid %s) is gone; its stderr ends:\n%s" % (pid, tail)
        if tc:
            tc.fail(msg)
        raise AssertionError(msg)


def client(url=URL, api_key="e2e-no-key", timeout=None):
    return openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0,
                         timeout=timeout or TIMEOUT)


def async_client(url=URL, api_key="e2e-no-key", timeout=None):
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0,
                              timeout=timeout or TIMEOUT)


_model_id = None


def model_id():
    """The served model's id, from /v1/models (one model)."""
    global _model_id
    if _model_id is None:
        st, body = http_json("GET", "/v1/models")
        assert st == 200, "GET /v1/models: %d %r" % (st, body)
        _model_id = body["data"][0]["id"]
    return _model_id


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)


def http(method, path, body=None, headers=None, host=None, port=None, timeout=None):
    """One request on a fresh connection; body is bytes, str or a JSON-able object."""
    h = {"Connection": "close"}
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    elif isinstance(body, str):
        body = body.encode()
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    c = httpclient.HTTPConnection(host or HOST, port or PORT, timeout=timeout or TIMEOUT)
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        c.close()


def http_json(method, path, body=None, **kw):
    r = http(method, path, body, **kw)
    try:
        return r.status, json.loads(r.body) if r.body else None
    except ValueError:
        return r.status, r.body


def post_completion(body, **kw):
    return http_json("POST", "/v1/completions", body, **kw)


def sse_events(resp):
    """Yields the JSON payload of each `data:` event of an http.client response, then None for
    the [DONE] sentinel."""
    buf = b""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\r\n")
        if line == b"":
            if buf:
                data = buf
                buf = b""
                if data == b"[DONE]":
                    yield None
                    return
                yield json.loads(data)
            continue
        if line.startswith(b"data:"):
            d = line[5:]
            if d.startswith(b" "):
                d = d[1:]
            buf = buf + b"\n" + d if buf else d


# --- the error shape -----------------------------------------------------------------------------
def assert_openai_error(tc, status, body, want_status, what=""):
    tc.assertEqual(status, want_status, "%s: status %d, body %r" % (what, status, body))
    tc.assertIsInstance(body, dict, "%s: the error body is not JSON: %r" % (what, body))
    tc.assertIn("error", body, "%s: no 'error' object: %r" % (what, body))
    err = body["error"]
    tc.assertIsInstance(err, dict, what)
    tc.assertIsInstance(err.get("message"), str, "%s: error.message: %r" % (what, body))
    tc.assertTrue(err["message"], "%s: empty error.message" % what)
    tc.assertNotIn("\n", err["message"].strip(), "%s: the message is not one line" % what)
    tc.assertIsInstance(err.get("type"), str, "%s: error.type: %r" % (what, body))
    for k in ("param", "code"):
        tc.assertIn(k, err, "%s: error.%s missing (OpenAI sends it, null when unset): %r" % (what, k, body))


# --- /tokenize and /detokenize -------------------------------------------------------------------
def tokenize(text, **kw):
    st, body = http_json("POST", "/tokenize", {"prompt": text}, **kw)
    assert st == 200, "POST /tokenize: %d %r" % (st, body)
    return body["tokens"]


def detokenize(tokens, **kw):
    st, body = http_json("POST", "/detokenize", {"tokens": tokens}, **kw)
    assert st == 200, "POST /detokenize: %d %r" % (st, body)
    return body["prompt"]


# --- /metrics: the Prometheus text format (0.0.4) -------------------------------------------------
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _unescape(v):
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _float(s):
    return {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(s) if s in ("+Inf", "-Inf", "NaN") else float(s)


def parse_metrics(text):
    """Parses the text format strictly. Returns {family: {"type", "help", "samples": [(name,
    labels-dict, value)]}}; raises ValueError naming the line on anything malformed."""
    fams = {}
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                f = fams.setdefault(parts[2], {"type": None, "help": None, "samples": []})
                if parts[1] == "TYPE":
                    if f["type"] is not None:
                        raise ValueError("line %d: a second TYPE for %s" % (n, parts[2]))
                    if f["samples"]:
                        raise ValueError("line %d: TYPE for %s after its samples" % (n, parts[2]))
                    t = parts[3].strip() if len(parts) > 3 else ""
                    if t not in ("counter", "gauge", "histogram", "summary", "untyped"):
                        raise ValueError("line %d: unknown type %r" % (n, t))
                    f["type"] = t
                else:
                    f["help"] = parts[3] if len(parts) > 3 else ""
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError("line %d: not a sample: %r" % (n, line))
        name, lab, val = m.group(1), m.group(3), m.group(4)
        labels = {}
        if lab:
            pos = 0
            while pos < len(lab):
                lm = _LABEL.match(lab, pos)
                if not lm:
                    raise ValueError("line %d: bad labels %r" % (n, lab))
                if lm.group(1) in labels:
                    raise ValueError("line %d: label %s twice" % (n, lm.group(1)))
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        try:
            v = _float(val)
        except ValueError:
            raise ValueError("line %d: bad value %r" % (n, val))
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            base = name[: -len(suf)]
            if name.endswith(suf) and base in fams and fams[base]["type"] in ("histogram", "summary"):
                fam = base
                break
        if fam not in fams:
            raise ValueError("line %d: sample %s has no # TYPE line before it" % (n, name))
        fams[fam]["samples"].append((name, labels, v))
    for fam, f in fams.items():
        if f["type"] is None:
            raise ValueError("family %s has HELP but no TYPE" % fam)
        if f["type"] == "counter":
            for name, labels, v in f["samples"]:
                if v < 0 or math.isnan(v):
                    raise ValueError("counter %s%r is %r" % (name, labels, v))
        if f["type"] == "histogram":
            _check_histogram(fam, f)
    return fams


def _check_histogram(fam, f):
    series = {}
    for name, labels, v in f["samples"]:
        key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
        s = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if name == fam + "_bucket":
            if "le" not in labels:
                raise ValueError("histogram %s: a bucket without le" % fam)
            s["buckets"].append((_float(labels["le"]), v))
        elif name == fam + "_sum":
            s["sum"] = v
        elif name == fam + "_count":
            s["count"] = v
        else:
            raise ValueError("histogram %s: stray sample %s" % (fam, name))
    for key, s in series.items():
        b = sorted(s["buckets"])
        if not b or b[-1][0] != math.inf:
            raise ValueError("histogram %s%r: no le=\"+Inf\" bucket" % (fam, key))
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            raise ValueError("histogram %s%r: buckets are not cumulative: %r" % (fam, key, b))
        if s["count"] is None or s["sum"] is None:
            raise ValueError("histogram %s%r: _sum or _count missing" % (fam, key))
        if s["count"] != b[-1][1]:
            raise ValueError("histogram %s%r: _count %r != +Inf bucket %r" % (fam, key, s["count"], b[-1][1]))


def metrics():
    r = http("GET", "/metrics")
    assert r.status == 200, "GET /metrics: %d" % r.status
    return parse_metrics(r.body.decode())


def find_family(fams, *words, type=None, exclude=()):
    """Family names containing every word (any of the alternatives when a word is a tuple)."""
    out = []
    for name, f in sorted(fams.items()):
        if type and f["type"] != type:
            continue
        if any(x in name for x in exclude):
            continue
        if all((any(a in name for a in w) if isinstance(w, tuple) else w in name) for w in words):
            out.append(name)
    return out


def total(fams, fam, **labels):
    """Sum of a family's plain samples (not _bucket/_sum), optionally those matching labels;
    for a histogram, its _count."""
    f = fams[fam]
    want = fam + "_count" if f["type"] in ("histogram", "summary") else fam
    return sum(v for name, lab, v in f["samples"] if name == want and all(lab.get(k) == x for k, x in labels.items()))


def wait_for(pred, timeout, step=0.1):
    t0 = time.time()
    while True:
        v = pred()
        if v:
            return v
        if time.time() - t0 > timeout:
            return v
        time.sleep(step)


# --- servers of a suite's own ----------------------------------------------------------------------
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    """A radiance server started by a suite (its own flags: --api-key, small limits, a drain)."""

    def __init__(self, name, *args, model=None, deterministic=True):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        os.makedirs(LOGDIR, exist_ok=True)
        self.log = os.path.join(LOGDIR, "server-%s.log" % name)
        self.logf = open(self.log, "wb")
        cmd = [BIN, "--model", model or MODEL_FILE, "--host", "127.0.0.1", "--port", str(self.port),
               "--ctx", str(CTX), "--threads", "2"] + (["--deterministic"] if deterministic else []) + list(args)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)

    def tail(self, n=30):
        self.logf.flush()
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def wait_ready(self, timeout=None):
        timeout = timeout or (300 if QUICK else 120)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise AssertionError("%s exited %d before /health said 200:\n%s" % (" ".join(self.cmd), self.proc.returncode, self.tail()))
            try:
                r = http("GET", "/health", port=self.port, timeout=2)
                if r.status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("%s: /health not 200 after %d s:\n%s" % (" ".join(self.cmd), timeout, self.tail()))

    def ready(self, timeout=None):
        """wait_ready, killing the server when it never gets there; returns self."""
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def stop(self, timeout=30):
        """SIGTERM; returns the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.logf.close()
                return None
        self.logf.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.logf.closed:
            self.logf.close()


class E2E(unittest.TestCase):
    """Base: the server must be alive before and after every test."""

    def setUp(self):
        if _dead:  # one failure names the death; the tests after it are skipped, not failed
            self.skipTest("the server died in an earlier test")
        server_alive_or_fail(self)
        self._t0 = time.time()

    def tearDown(self):
        dt = time.time() - self._t0
        if dt > 5:
            print("(%.1f s)" % dt, end=" ", flush=True)
        server_alive_or_fail(self)

    def assert_serving(self, what=""):
        """The server still answers /health and a tiny completion."""
        server_alive_or_fail(self)
        r = http("GET", "/health")
        self.assertEqual(r.status, 200, "after %s: /health %d %r" % (what, r.status, r.body))
        st, body = post_completion({"model": model_id(), "prompt": "Hello", "max_tokens": 2, "temperature": 0})
        self.assertEqual(st, 200, "after %s: a tiny completion got %d %r" % (what, st, body))
