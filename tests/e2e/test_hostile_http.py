"""Hostile HTTP clients and signals, against servers of this suite's own: 30 connections that
trickle their headers against --max-conns 20 while a real client is still served; the header and
body deadlines (--header-timeout, --body-timeout: closed, or 408); --max-conns counts whole
requests; bytes in a URL path that are not UTF-8 or are control characters (404, never 500); a
served name of 200 characters in /v1/models/{id}; a request larger than the KV pool (400, not a
429 "try again"); SIGHUP and SIGQUIT drain a stream in flight and exit 0; SIGPIPE is ignored.

The waits below are bounds that turn a hang into a failure (a trickle that the server never
closes ends after a minute); nothing asserts on how long anything took."""
import json
import select
import signal
import socket
import threading
import time
import unittest

from common import (QUICK, Server, assert_openai_error, client, http, http_json, parse_metrics, total,
                    wait_for)

BOUND = 120 if QUICK else 60   # seconds before a trickle that was never closed gives up


def own_server(tc, name, *args):
    srv = Server(name, *args).ready()
    tc.addCleanup(srv.kill)
    return srv


def server_metrics(port):
    r = http("GET", "/metrics", port=port, timeout=30)
    assert r.status == 200, "GET /metrics: %d %r" % (r.status, r.body[:200])
    return parse_metrics(r.body.decode())


CUT = "radiance_http_closed_incomplete_total"


def stop_ok(tc, srv):
    """SIGTERM: the server drains and exits 0."""
    rc = srv.stop()
    with open(srv.log, errors="replace") as f:
        tail = "".join(f.readlines()[-30:])
    tc.assertEqual(rc, 0, "exit status after SIGTERM:\n" + tail)


def closed_by_server(s):
    """True once the server has closed s (end of file, or a reset)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        return bool(r) and s.recv(65536) == b""
    except OSError:
        return True


class Trickler(threading.Thread):
    """A client that sends a request head (and, with body=True, a head and part of its body) one
    byte every `every` seconds, never finishing it, until the server closes the connection or
    BOUND passes. Records what the server sent back."""

    def __init__(self, port, every=0.5, body=False, path="/v1/completions"):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.every, self.body = every, body
        self.closed_by_server = False
        self.got = b""
        self.stop = threading.Event()
        if body:
            self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 100000\r\n\r\n{\"prompt\": \"" % path.encode())
        else:
            self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nX-Trickle: " % path.encode())

    def run(self):
        t0 = time.time()
        try:
            while not self.stop.is_set() and time.time() - t0 < BOUND:
                r, _, _ = select.select([self.sock], [], [], self.every)
                if r:
                    d = self.sock.recv(65536)
                    if not d:
                        self.closed_by_server = True
                        return
                    self.got += d
                    continue
                self.sock.sendall(b"a")
        except OSError:  # reset, or a broken pipe: the server closed it
            self.closed_by_server = True

    def close(self):
        self.stop.set()
        self.join(5)
        self.sock.close()


class TestSlowClients(unittest.TestCase):
    def test_30_tricklers_do_not_lock_out_a_real_client(self):
        srv = own_server(self, "slowloris", "--max-conns", "20", "--header-timeout", "600")
        st, body = http_json("GET", "/v1/models", port=srv.port)
        model = body["data"][0]["id"]
        tr = []
        try:
            for _ in range(30):
                tr.append(Trickler(srv.port))
                tr[-1].start()
            # incomplete requests may hold 15 of the 20: the server closes the oldest past that
            closed = wait_for(lambda: sum(t.closed_by_server for t in tr) >= 15, BOUND)
            self.assertTrue(closed, "30 trickling connections, --max-conns 20: the server closed %d of them (want >= 15)"
                            % sum(t.closed_by_server for t in tr))
            r = client(url=srv.url, timeout=BOUND).completions.create(model=model, prompt="The capital of France is",
                                                                    max_tokens=2, temperature=0)
            self.assertTrue(r.choices[0].text, "the real client got no text")
            st, _ = http_json("GET", "/health", port=srv.port)
            self.assertEqual(st, 200, "/health while 30 clients trickle")
            self.assertLessEqual(sum(not t.closed_by_server for t in tr), 15, "more than 3/4 of --max-conns held by tricklers")
            m = server_metrics(srv.port)
            self.assertGreaterEqual(total(m, CUT, reason="incomplete_share"), 15, m[CUT]["samples"])
        finally:
            for t in tr:
                t.close()
        stop_ok(self, srv)

    def test_max_conns_counts_whole_requests(self):
        srv = own_server(self, "max-conns", "--max-conns", "8")
        model = http_json("GET", "/v1/models", port=srv.port)[1]["data"][0]["id"]
        # 8 idle connections hold --max-conns 8 but send no request: once they have been incomplete
        # for a second (a burst of whole requests is not cut), a 9th client's request is served
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(8)]
        try:
            got = wait_for(lambda: http_json("GET", "/v1/models", port=srv.port)[0] == 200, 30, step=0.3)
            self.assertTrue(got, "8 idle connections, --max-conns 8: a whole request was never served")
            self.assertGreaterEqual(sum(closed_by_server(c) for c in idle), 2, "no idle connection was closed to make room")
        finally:
            for c in idle:
                c.close()
        # 8 connections with requests in flight: a 9th is answered 503 too_many_connections
        b = json.dumps({"model": model, "prompt": "Count: 1, 2, 3, 4,", "max_tokens": 400, "temperature": 0,
                        "stream": True}).encode()
        busy = []
        try:
            for _ in range(8):
                c = socket.create_connection(("127.0.0.1", srv.port), timeout=BOUND)
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
                busy.append(c)
            for c in busy:
                got = b""
                while b"data:" not in got:
                    d = c.recv(4096)
                    self.assertTrue(d, "a stream ended before its first event: %r" % got)
                    got += d
            # the 8 idle ones above may still be closing: allow a moment for MHD to report them gone
            def ninth():
                st, body = http_json("GET", "/v1/models", port=srv.port)
                return (st, body) if st == 503 else None
            got = wait_for(ninth, 10)
            self.assertIsNotNone(got, "8 streams in flight, --max-conns 8: a 9th connection was not refused")
            assert_openai_error(self, got[0], got[1], 503, "the 9th connection")
            self.assertEqual(got[1]["error"]["code"], "too_many_connections")
        finally:
            for c in busy:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                c.close()
        stop_ok(self, srv)

    def test_header_and_body_deadlines(self):
        # --idle-timeout 0: only the deadlines can close these connections
        srv = own_server(self, "deadlines", "--header-timeout", "1", "--body-timeout", "1.5", "--idle-timeout", "0")
        head, body = Trickler(srv.port, every=0.2), Trickler(srv.port, every=0.2, body=True)
        try:
            head.start(), body.start()
            head.join(BOUND + 5), body.join(BOUND + 5)
            self.assertTrue(head.closed_by_server, "a request head trickled a byte every 0.2 s: never closed (--header-timeout 1)")
            self.assertEqual(head.got, b"", "a connection cut waiting for its head is closed without an answer")
            self.assertTrue(body.closed_by_server, "a body trickled a byte every 0.2 s: never closed (--body-timeout 1.5)")
            self.assertTrue(body.got.startswith(b"HTTP/1.1 408 "), "the body deadline's answer: %r" % body.got[:200])
            err = json.loads(body.got.split(b"\r\n\r\n", 1)[1])
            assert_openai_error(self, 408, err, 408, "--body-timeout")
            self.assertEqual(err["error"]["code"], "request_timeout")
            self.assertIn("--body-timeout", err["error"]["message"])
        finally:
            head.close(), body.close()
        # a kept-alive connection with no next request is closed too (a pooled client reconnects)
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=BOUND)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or not got.endswith(b"}"):
            d = s.recv(4096)
            self.assertTrue(d, "the keep-alive answer was cut: %r" % got)
            got += d
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got[:100])
        self.assertEqual(s.recv(4096), b"", "an idle kept-alive connection after --header-timeout 1")
        s.close()
        m = server_metrics(srv.port)
        self.assertGreaterEqual(total(m, CUT, reason="header_timeout"), 2, m[CUT]["samples"])
        self.assertGreaterEqual(total(m, CUT, reason="body_timeout"), 1, m[CUT]["samples"])
        # whole requests are not touched: a stream longer than both deadlines finishes
        r = list(client(url=srv.url, timeout=BOUND).completions.create(
            model=http_json("GET", "/v1/models", port=srv.port)[1]["data"][0]["id"], prompt="Count: 1, 2, 3,",
            max_tokens=48 if QUICK else 96, temperature=0, stream=True))
        self.assertEqual(r[-1].choices[0].finish_reason, "length")
        stop_ok(self, srv)


class TestPaths(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.name = "m" * 200  # --served-model-name's limit
        cls.srv = Server("paths", "--served-model-name", cls.name).ready()

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        if rc != 0:
            raise AssertionError("the paths server exited %r on SIGTERM:\n%s" % (rc, cls.srv.tail()))

    def raw(self, request):
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=30)
        s.sendall(request)
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
        s.close()
        return data

    def test_bytes_that_are_not_utf8_or_printable(self):
        for path in (b"/%FF%FE", b"/he\xffalth", b"/v1/models/%C3%28", b"/v1/models/%0A%0Dx", b"/v1/%00/x",
                     b"/v1/models/" + b"%E2%82" * 60, b"/" + b"\x80" * 300):
            data = self.raw(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status = int(data.split(b" ", 2)[1])
            body = json.loads(data.split(b"\r\n\r\n", 1)[1])
            assert_openai_error(self, status, body, 404, "GET %r" % path[:40])
        st, _ = http_json("GET", "/health", port=self.srv.port)
        self.assertEqual(st, 200)

    def test_a_method_that_is_not_utf8(self):
        data = self.raw(b"G\xffT /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status = int(data.split(b" ", 2)[1])
        self.assertTrue(400 <= status < 500, "method G\\xffT: %r" % data[:200])

    def test_long_served_name(self):
        st, body = http_json("GET", "/v1/models/" + self.name, port=self.srv.port)
        self.assertEqual(st, 200, "GET /v1/models/<200 characters>: %r" % (body,))
        self.assertEqual(body["id"], self.name)
        st, body = http_json("GET", "/v1/models/" + self.name + "x", port=self.srv.port)
        assert_openai_error(self, st, body, 404, "a name one character longer")
        r = client(url=self.srv.url).completions.create(model=self.name, prompt="Hi", max_tokens=2, temperature=0)
        self.assertEqual(r.model, self.name)


class TestNeverFits(unittest.TestCase):
    def test_a_request_larger_than_the_kv_pool_is_400(self):
        # 429 says "try again"; a request the whole pool cannot hold never fits, so it is 400
        srv = own_server(self, "kv-small", "--kv-blocks", "4")
        model = http_json("GET", "/v1/models", port=srv.port)[1]["data"][0]["id"]
        st, body = http_json("POST", "/v1/completions", {"model": model, "prompt": "hello " * 100, "max_tokens": 4},
                             port=srv.port)
        assert_openai_error(self, st, body, 400, "a request needing more KV blocks than --kv-blocks 4")
        self.assertIn("KV blocks", body["error"]["message"])
        st, body = http_json("POST", "/v1/completions", {"model": model, "prompt": "Hi", "max_tokens": 4}, port=srv.port)
        self.assertEqual(st, 200, body)
        stop_ok(self, srv)


class TestSignals(unittest.TestCase):
    def stream_then_signal(self, sig):
        srv = own_server(self, "signal-%d" % sig, "--drain-timeout", "60")
        model = http_json("GET", "/v1/models", port=srv.port)[1]["data"][0]["id"]
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=BOUND)
        b = json.dumps({"model": model, "prompt": "Count: 1, 2, 3, 4,", "max_tokens": 64 if QUICK else 120,
                        "temperature": 0, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
        got = b""
        while got.count(b"data:") < 2:
            d = s.recv(4096)
            self.assertTrue(d, "the stream ended before two events: %r" % got)
            got += d
        srv.proc.send_signal(sig)
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
        s.close()
        try:
            rc = srv.proc.wait(BOUND)
        except Exception:
            rc = None
        name = signal.Signals(sig).name
        self.assertEqual(rc, 0, "exit status after %s with a stream in flight:\n%s" % (name, srv.tail()))
        events = [ln[5:].strip() for ln in got.split(b"\n") if ln.startswith(b"data:")]
        self.assertEqual(events[-1:], [b"[DONE]"], "%s: the stream in flight did not finish: %r" % (name, got[-300:]))
        reasons = [c.get("finish_reason") for e in events[:-1] for c in json.loads(e).get("choices", []) if c.get("finish_reason")]
        self.assertIn(reasons, (["length"], ["stop"]), "%s: the drained stream was cut: %r" % (name, reasons))
        self.assertIn("%s: draining" % name, srv.tail(50))

    def test_sighup_drains(self):
        self.stream_then_signal(signal.SIGHUP)

    def test_sigquit_drains(self):
        self.stream_then_signal(signal.SIGQUIT)

    def test_sigpipe_is_ignored(self):
        srv = own_server(self, "sigpipe")
        with open("/proc/%d/status" % srv.proc.pid) as f:
            ign = int([ln for ln in f if ln.startswith("SigIgn:")][0].split()[1], 16)
        self.assertTrue(ign & (1 << (signal.SIGPIPE - 1)), "SIGPIPE is not ignored (SigIgn %x)" % ign)
        # clients that reset the connection once their stream began: the server's next writes go
        # into a reset socket (EPIPE, which would be SIGPIPE)
        model = http_json("GET", "/v1/models", port=srv.port)[1]["data"][0]["id"]
        b = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 16, "temperature": 0, "stream": True}).encode()
        for _ in range(10):
            c = socket.create_connection(("127.0.0.1", srv.port), timeout=BOUND)
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
            self.assertTrue(c.recv(16), "no answer began")
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()
        self.assertIsNone(srv.proc.poll(), "the server died when clients left:\n%s" % srv.tail())
        r = client(url=srv.url).completions.create(model=model, prompt="Hi", max_tokens=2, temperature=0)
        self.assertTrue(r.choices)
        stop_ok(self, srv)


if __name__ == "__main__":
    unittest.main()
