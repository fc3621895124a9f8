"""Servers of this suite's own: --api-key (401 without the right key), the configurable limits
(--max-body 413, --max-header 431, --idle-timeout), and SIGTERM (stop admitting,
drain in-flight streams, exit 0; cut at --drain-timeout)."""
import json
import socket
import threading
import time
import unittest

import openai

from common import QUICK, Server, assert_openai_error, client, http, http_json

KEY = "e2e-secret-key-0123456789"


def sse_stream(port, body, headers=b""):
    """Starts a streaming completion on a raw socket; returns the socket once two events came."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers +
              b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
    got = b""
    while got.count(b"data:") < 2:
        d = s.recv(4096)
        if not d:
            raise AssertionError("the stream ended before two events: %r" % got)
        got += d
    return s, got


def read_all(s, into):
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            into.append(d)
    except OSError as e:
        into.append(("error", e))


class TestLimits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("limits", "--api-key", KEY, "--max-body", "4096", "--max-header", "8192",
                         "--max-conns", "8", "--idle-timeout", "3").ready()
        cls.auth = {"Authorization": "Bearer " + KEY}

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        if rc != 0:
            raise AssertionError("the limits server exited %r on SIGTERM:\n%s" % (rc, cls.srv.tail()))

    def req(self, method, path, body=None, headers=None):
        return http_json(method, path, body, headers=headers, port=self.srv.port, timeout=120)

    def test_api_key(self):
        body = {"model": self.model(), "prompt": "Hi", "max_tokens": 2}
        for h, what in ((None, "no key"), ({"Authorization": "Bearer wrong"}, "a wrong key"),
                        ({"Authorization": "Bearer " + KEY[:-1]}, "a key one character short"),
                        ({"Authorization": "Bearer " + KEY + "x"}, "a key one character long"),
                        ({"Authorization": KEY}, "the key without 'Bearer'")):
            for method, path, b in (("GET", "/v1/models", None), ("POST", "/v1/completions", body),
                                    ("POST", "/v1/chat/completions", {"model": "m", "messages": []})):
                st, resp = self.req(method, path, b, headers=h)
                assert_openai_error(self, st, resp, 401, "%s %s with %s" % (method, path, what))
        st, resp = self.req("POST", "/v1/completions", body, headers=self.auth)
        self.assertEqual(st, 200, resp)
        with self.assertRaises(openai.AuthenticationError):
            client(url=self.srv.url, api_key="wrong").models.list()
        r = client(url=self.srv.url, api_key=KEY).chat.completions.create(
            model=self.model(), messages=[{"role": "user", "content": "Hi"}], max_tokens=2, stream=True)
        self.assertTrue(list(r))

    def model(self):
        st, body = self.req("GET", "/v1/models", headers=self.auth)
        self.assertEqual(st, 200, body)
        return body["data"][0]["id"]

    def test_max_body(self):
        body = {"model": self.model(), "prompt": "x" * 5000, "max_tokens": 1}
        st, resp = self.req("POST", "/v1/completions", body, headers=self.auth)
        assert_openai_error(self, st, resp, 413, "a 5 kB body with --max-body 4096")
        st, resp = self.req("POST", "/v1/completions", dict(body, prompt="x" * 100), headers=self.auth)
        self.assertEqual(st, 200, resp)

    def test_max_header(self):
        h = dict(self.auth, **{"X-Padding": "p" * 16384})
        r = http("GET", "/v1/models", headers=h, port=self.srv.port)
        self.assertEqual(r.status, 431, "a 16 kB header with --max-header 8192: %d %r" % (r.status, r.body[:200]))
        self.assertEqual(self.req("GET", "/v1/models", headers=self.auth)[0], 200)

    def test_idle_timeout(self):
        # 8 connections that send nothing: --idle-timeout 3 closes them (a 408 first is fine). That
        # they cannot lock out a 9th client of --max-conns 8 is test_hostile_http's
        # test_max_conns_counts_whole_requests; 503 past --max-conns is counted on whole requests.
        socks = [socket.create_connection(("127.0.0.1", self.srv.port), timeout=10) for _ in range(8)]
        try:
            time.sleep(5)
            for s in socks:
                try:
                    d = s.recv(4096)
                except OSError:
                    d = b""
                self.assertTrue(d == b"" or d.startswith(b"HTTP/1.1 408"), "an idle connection after --idle-timeout 3: %r" % d[:100])
        finally:
            for s in socks:
                s.close()
        time.sleep(0.3)
        self.assertEqual(self.req("GET", "/v1/models", headers=self.auth)[0], 200)


class TestDrain(unittest.TestCase):
    def _start(self, name, drain):
        srv = Server(name, "--drain-timeout", str(drain)).ready()
        self.addCleanup(srv.kill)
        st, body = http_json("GET", "/v1/models", port=srv.port)
        return srv, body["data"][0]["id"]

    def test_sigterm_drains_then_exits_0(self):
        drain = 40 if QUICK else 25
        srv, model = self._start("drain", drain)
        n = 120  # long enough to be in flight through the checks below
        s, got = sse_stream(srv.port, {"model": model, "prompt": "Count: 1, 2, 3, 4,", "max_tokens": n,
                                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
        rest = []
        t = threading.Thread(target=read_all, args=(s, rest))
        t.start()
        t0 = time.time()
        srv.proc.send_signal(15)
        # no admission while draining: 503 (or the listener is already closed); /health turns
        # 503 as soon as the signal is handled
        def health():
            try:
                return http_json("GET", "/health", port=srv.port, timeout=10)
            except OSError:
                return 503, "connection refused"
        st, resp = health()
        while st != 503 and time.time() - t0 < 3:
            time.sleep(0.05)
            st, resp = health()
        self.assertEqual(st, 503, "/health after SIGTERM: %r" % (resp,))
        try:
            st, resp = http_json("POST", "/v1/completions", {"model": model, "prompt": "Hi", "max_tokens": 2},
                                 port=srv.port, timeout=10)
        except OSError:
            st, resp = 503, "connection refused"
        self.assertEqual(st, 503, "a completion while draining: %r" % (resp,))
        in_flight = not any(isinstance(x, bytes) and b"[DONE]" in x for x in rest)
        self.assertTrue(in_flight, "the stream ended before the drain was checked: lengthen it")
        t.join(drain + 10)
        try:
            rc = srv.proc.wait(drain + 10)
        except Exception:
            rc = None
        self.assertEqual(rc, 0, "exit status after SIGTERM (drain %d s):\n%s" % (drain, srv.tail()))
        self.assertLess(time.time() - t0, drain + 5)
        stream = got + b"".join(x for x in rest if isinstance(x, bytes))
        events = [ln[5:].strip() for ln in stream.split(b"\n") if ln.startswith(b"data:")]
        self.assertEqual(events[-1:], [b"[DONE]"], "the in-flight stream was not finished: ends %r" % stream[-300:])
        finals = [json.loads(e) for e in events[:-1] if b'"finish_reason"' in e]
        reasons = [c.get("finish_reason") for e in finals for c in e.get("choices", []) if c.get("finish_reason")]
        self.assertIn(reasons[-1:], (["length"], ["stop"]), "the drained stream's finish_reason: %r" % reasons)
        usage = [json.loads(e)["usage"] for e in events[:-1] if b'"usage"' in e and json.loads(e).get("usage")]
        self.assertTrue(usage and usage[-1]["completion_tokens"] >= 1)
        s.close()

    def test_drain_timeout_cuts(self):
        srv, model = self._start("drain-cut", 1)
        s, _ = sse_stream(srv.port, {"model": model, "prompt": "Count: 1, 2, 3, 4,", "max_tokens": 400,
                                     "temperature": 0, "stream": True})
        t0 = time.time()
        srv.proc.send_signal(15)
        try:
            rc = srv.proc.wait(15)
        except Exception:
            rc = None
        self.assertEqual(rc, 0, "exit status after SIGTERM with --drain-timeout 1:\n%s" % srv.tail())
        self.assertLess(time.time() - t0, 8, "--drain-timeout 1 took %.1f s" % (time.time() - t0))
        s.close()
