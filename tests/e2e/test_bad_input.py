"""Bad input: each answered with the right status and OpenAI's error shape, and the server still
serving afterwards. Malformed JSON, wrong types, an unknown model, max_tokens beyond the context,
a 10 MB body, a prompt longer than the context, 1,000 idle connections, clients that disconnect
mid-stream or while a non-streaming request is being generated; numeric fields out of range (the
field named), fields that are not served, \u0000 in strings."""
import json
import resource
import socket
import subprocess
import threading
import time

import openai

from common import (BIN, CTX, E2E, HOST, MODEL_FILE, PORT, QUICK, assert_openai_error, client, http_json,
                    metrics, model_id, total, wait_for)

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


def raw_request(method, path, body, headers=(), chunked=False, timeout=60):
    """Sends a request on a raw socket while reading the answer in parallel (a server may answer
    and close before an oversized body is sent); returns (status or None, body bytes, what)."""
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    head = "%s %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n" % (method, path, HOST, PORT)
    head += "".join("%s: %s\r\n" % h for h in headers)
    head += "Transfer-Encoding: chunked\r\n" if chunked else "Content-Length: %d\r\n" % len(body)
    head += "Connection: close\r\n\r\n"
    sent = {"err": None}

    def send():
        try:
            s.sendall(head.encode())
            step = 65536
            for i in range(0, len(body), step):
                part = body[i: i + step]
                s.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            if chunked:
                s.sendall(b"0\r\n\r\n")
        except OSError as e:
            sent["err"] = e
    t = threading.Thread(target=send, daemon=True)
    t.start()
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except OSError as e:
        if not data:
            t.join(5)
            s.close()
            return None, b"", "connection error %r before any response (sender: %r)" % (e, sent["err"])
    t.join(5)
    s.close()
    if not data.startswith(b"HTTP/1."):
        return None, data, "no HTTP response: %r" % data[:200]
    status = int(data.split(b" ", 2)[1])
    head_end = data.find(b"\r\n\r\n")
    payload = data[head_end + 4:] if head_end >= 0 else b""
    if b"transfer-encoding: chunked" in data[:head_end].lower():
        out, rest = b"", payload
        while rest:
            line, _, rest = rest.partition(b"\r\n")
            n = int(line.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        payload = out
    return status, payload, ""


class TestMalformed(E2E):
    BODIES = [b'{"model": "m", "prompt": ', b"not json at all", b"", b"[1, 2, 3]", b'"a string"',
              b'{"prompt": "hi", "max_tokens": 4}}', b'{"prompt": "\xff\xfe", "max_tokens": 2}', b"{" * 100000]

    def test_malformed_json(self):
        for path in (COMPLETIONS, CHAT):
            for b in self.BODIES:
                st, body = http_json("POST", path, b)
                assert_openai_error(self, st, body, 400, "%s %r" % (path, b[:40]))
        self.assert_serving("malformed JSON")

    def test_missing_fields(self):
        st, body = http_json("POST", COMPLETIONS, {"model": model_id(), "max_tokens": 2})
        assert_openai_error(self, st, body, 400, "completion without a prompt")
        st, body = http_json("POST", CHAT, {"model": model_id(), "max_tokens": 2})
        assert_openai_error(self, st, body, 400, "chat without messages")
        st, body = http_json("POST", CHAT, {"model": model_id(), "messages": []})
        assert_openai_error(self, st, body, 400, "chat with no messages")

    def test_wrong_types(self):
        m = model_id()
        comp = [{"prompt": 5}, {"prompt": "hi", "max_tokens": "ten"}, {"prompt": "hi", "temperature": "hot"},
                {"prompt": "hi", "n": 1.5}, {"prompt": "hi", "stream": "yes"}, {"prompt": "hi", "stop": 7},
                {"prompt": "hi", "seed": "x"}, {"prompt": "hi", "logprobs": "yes"}, {"prompt": "hi", "top_p": [1]},
                {"prompt": "hi", "logit_bias": [1, 2]}, {"prompt": "hi", "stream_options": "usage"},
                {"prompt": "hi", "max_tokens": -5}, {"prompt": "hi", "temperature": -1}, {"prompt": "hi", "n": 0},
                {"prompt": "hi", "top_p": 1.5}, {"prompt": "hi", "logprobs": 100},
                {"prompt": [10 ** 9]}, {"prompt": [[1, 2], [3, None]]}, {"prompt": "hi", "model": 7}]
        chat = [{"messages": "hello"}, {"messages": [{"role": "user", "content": 5}]},
                {"messages": [{"role": "wizard", "content": "x"}]}, {"messages": [{"content": "no role"}]},
                {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 50},
                {"messages": [{"role": "user", "content": "x"}], "max_tokens": {}}]
        for path, cases in ((COMPLETIONS, comp), (CHAT, chat)):
            for c in cases:
                req = dict({"model": m, "max_tokens": 2}, **c)
                st, body = http_json("POST", path, req)
                assert_openai_error(self, st, body, 400, "%s %s" % (path, json.dumps(c)[:80]))
        self.assert_serving("wrong types")

    def test_unknown_model(self):
        for path, extra in ((COMPLETIONS, {"prompt": "hi"}), (CHAT, {"messages": [{"role": "user", "content": "hi"}]})):
            st, body = http_json("POST", path, dict({"model": "no-such-model", "max_tokens": 2}, **extra))
            assert_openai_error(self, st, body, 404, "%s: unknown model" % path)
        with self.assertRaises(openai.NotFoundError):
            client().completions.create(model="no-such-model", prompt="hi", max_tokens=2)
        self.assert_serving("unknown model")

    def test_unknown_path_and_method(self):
        st, body = http_json("GET", "/v1/no-such-thing")
        assert_openai_error(self, st, body, 404, "unknown path")
        st, body = http_json("GET", COMPLETIONS)
        self.assertIn(st, (404, 405), "GET %s: %d" % (COMPLETIONS, st))

    def test_max_tokens_beyond_context(self):
        for mt in (CTX, CTX * 4, 2 ** 31 - 1):
            st, body = http_json("POST", COMPLETIONS, {"model": model_id(), "prompt": "Hello there", "max_tokens": mt})
            assert_openai_error(self, st, body, 400, "max_tokens %d with --ctx %d" % (mt, CTX))
        with self.assertRaises(openai.BadRequestError):
            client().chat.completions.create(model=model_id(), messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=CTX * 4)
        self.assert_serving("max_tokens beyond the context")

    def test_prompt_longer_than_context(self):
        long = "hello " * (CTX * 2)
        st, body = http_json("POST", COMPLETIONS, {"model": model_id(), "prompt": long, "max_tokens": 1})
        assert_openai_error(self, st, body, 400, "a prompt of ~%d tokens with --ctx %d" % (CTX * 2, CTX))
        st, body = http_json("POST", COMPLETIONS, {"model": model_id(), "prompt": [300] * (CTX + 1), "max_tokens": 1})
        assert_openai_error(self, st, body, 400, "%d prompt ids with --ctx %d" % (CTX + 1, CTX))
        st, body = http_json("POST", CHAT, {"model": model_id(), "messages": [{"role": "user", "content": long}],
                                            "max_tokens": 1})
        assert_openai_error(self, st, body, 400, "a chat message longer than the context")
        with self.assertRaises(openai.BadRequestError):
            client().completions.create(model=model_id(), prompt=long, max_tokens=1, stream=True)
        self.assert_serving("a prompt longer than the context")

    def test_10mb_body(self):
        big = json.dumps({"model": model_id(), "prompt": "x" * (10 * 1024 * 1024), "max_tokens": 1}).encode()
        for chunked in (False, True):
            st, payload, why = raw_request("POST", COMPLETIONS, big, chunked=chunked)
            what = "a 10 MB body (%s)" % ("chunked" if chunked else "Content-Length")
            self.assertIsNotNone(st, "%s: %s" % (what, why))
            try:
                body = json.loads(payload)
            except ValueError:
                body = payload
            assert_openai_error(self, st, body, 413, what)
        self.assert_serving("a 10 MB body")


class TestConnections(E2E):
    def test_1000_idle_connections(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need = 1200
        if soft < need:
            if hard != resource.RLIM_INFINITY and hard < need:
                self.skipTest("RLIMIT_NOFILE hard limit %d < %d" % (hard, need))
            resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(hard, 4096), hard))
        socks = []
        try:
            for i in range(1000):
                s = socket.create_connection((HOST, PORT), timeout=30)
                if i % 2:  # half say nothing; half stop inside the headers
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
                socks.append(s)
            time.sleep(0.5)
            t0 = time.time()
            r = client(timeout=120).completions.create(model=model_id(), prompt="The capital of France is",
                                                       max_tokens=4, temperature=0)
            self.assertTrue(r.choices[0].text)
            st, _ = http_json("GET", "/health")
            self.assertEqual(st, 200, "/health with 1,000 idle connections open")
            self.assertLess(time.time() - t0, 60)
        finally:
            for s in socks:
                s.close()
        self.assert_serving("1,000 idle connections")

    def _disconnect_mid_stream(self, n, stream=True):
        fams = metrics()
        run, used, gen, req = ("radiance_running_sequences", "radiance_kv_blocks_used",
                               "radiance_generation_tokens_total", "radiance_requests_total")
        cancelled = lambda m: total(m, req, outcome="cancelled")
        c0, g0 = cancelled(fams), total(fams, gen)
        max_tokens = 300
        body = json.dumps({"model": model_id(), "prompt": "Count: 1, 2, 3, 4,", "max_tokens": max_tokens,
                           "temperature": 0, "stream": stream}).encode()
        socks = []
        for _ in range(n):
            s = socket.create_connection((HOST, PORT), timeout=60)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            socks.append(s)
        if stream:
            for s in socks:  # until two events have arrived: the sequence is running
                got = b""
                while got.count(b"data:") < 2:
                    b = s.recv(4096)
                    self.assertTrue(b, "the stream ended before two events: %r" % got)
                    got += b
        else:  # a non-streaming request says nothing until it ends: watch the server instead
            wait_for(lambda: total(metrics(), gen) - g0 >= 2 * n or None, 30 if QUICK else 10)
        running = total(metrics(), run)
        self.assertGreaterEqual(running, 1, "no running sequence while %d streams are open" % n)
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        idle = wait_for(lambda: (lambda m: m if total(m, run) == 0 and total(m, used) == 0 else None)(metrics()),
                        30 if QUICK else 10)
        m = metrics()
        self.assertIsNotNone(idle, "after %d clients left mid-stream: running %r, kv blocks used %r"
                             % (n, total(m, run), total(m, used)))
        self.assertLess(total(m, gen) - g0, n * max_tokens, "the sequences ran to max_tokens: not cancelled")
        self.assertEqual(cancelled(m) - c0, n, '%s{outcome="cancelled"} did not count the %d cancellations: %r'
                         % (req, n, m[req]["samples"]))
        # and they stay stopped
        g1 = total(m, gen)
        time.sleep(0.5)
        self.assertEqual(total(metrics(), gen), g1, "tokens still being generated after the clients left")

    def test_disconnect_mid_stream(self):
        self._disconnect_mid_stream(1)
        self.assert_serving("a client that disconnected mid-stream")

    def test_disconnect_while_waiting_without_stream(self):
        # a suspended non-streaming request: the server watches its socket for the hang-up
        self._disconnect_mid_stream(2, stream=False)
        self.assert_serving("clients that left a non-streaming request")

    def test_disconnect_many_mid_stream(self):
        self._disconnect_mid_stream(8)
        self.assert_serving("8 clients that disconnected mid-stream")


def with_raw(path_body, field, raw):
    """A body with `field` spliced in as raw JSON text (1e400 and 2**64 have no Python float/JSON
    round trip that keeps them as written)."""
    body = dict(path_body)
    body.pop(field, None)
    return (json.dumps(body)[:-1] + ', "%s": %s}' % (field, raw)).encode()


class TestFields(E2E):
    """Every numeric field checked one way (finite, in range, whole where it must be), the field
    named in the 400's param; fields the server does not serve refused by name; \\u0000."""

    def base(self):
        return {"model": model_id(), "prompt": "Hello", "max_tokens": 2, "temperature": 0}

    def assert_param(self, st, body, param, what, status=400):
        assert_openai_error(self, st, body, status, what)
        self.assertEqual(body["error"]["param"], param, "%s: param %r, message %r" % (what, body["error"]["param"],
                                                                                   body["error"]["message"]))

    def test_numbers_name_their_field(self):
        cases = [("seed", "18446744073709551616"), ("seed", "99999999999999999999999999999999"), ("seed", "-1"),
                 ("seed", "1.5"), ("seed", "1e400"), ("seed", "-1e400"), ("seed", "9223372036854775808"),
                 ("top_p", "1e-300"), ("top_p", "0"), ("top_p", "1.0000001"), ("top_p", "-1e400"),
                 ("temperature", "1e400"), ("temperature", "-0.001"), ("temperature", "101"),
                 ("n", "1e400"), ("n", "2.5"), ("n", "0"), ("n", "129"), ("n", "18446744073709551616"),
                 ("max_tokens", "1e400"), ("max_tokens", "4294967296"), ("max_tokens", "0.5"),
                 ("top_k", "1.5"), ("top_k", "-2"), ("min_p", "1.5"), ("presence_penalty", "1e400"),
                 ("frequency_penalty", "-2.5"), ("repetition_penalty", "1e-300"), ("repetition_penalty", "0"),
                 ("logprobs", "1e400"), ("logprobs", "21"),
                 ("logit_bias", '{"5": 1e400}'), ("logit_bias", '{"5": 101}'), ("logit_bias", '{"5": "1"}'),
                 ("logit_bias", '{"x": 1}'), ("logit_bias", '{"-1": 1}'), ("logit_bias", '{"+5": 1}'),
                 ("logit_bias", '{" 5": 1}'), ("logit_bias", '{"99999999999": 1}')]
        for field, raw in cases:
            st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), field, raw))
            self.assert_param(st, body, field, "%s: %s" % (field, raw))
        chat = {"model": model_id(), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        for field, raw in (("top_logprobs", "1e400"), ("max_completion_tokens", "1e400"), ("seed", "-1e400")):
            st, body = http_json("POST", CHAT, with_raw(dict(chat, logprobs=True), field, raw))
            self.assert_param(st, body, field, "chat %s: %s" % (field, raw))
        st, body = http_json("POST", CHAT, dict(chat, max_tokens=2, max_completion_tokens=3))
        self.assert_param(st, body, "max_tokens", "max_tokens 2 beside max_completion_tokens 3")
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=model_id(), prompt="Hi", max_tokens=2, seed=2 ** 64)
        self.assertIn("seed", str(cm.exception))
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=model_id(), prompt="Hi", max_tokens=2, top_p=1e-300)
        self.assertIn("top_p", str(cm.exception))
        self.assert_serving("numbers out of range")

    def test_numbers_that_pass(self):
        for field, raw in (("seed", "7.0"), ("seed", "0"), ("seed", "9223372036854775807"), ("n", "1.0"),
                           ("max_tokens", "2.0"), ("top_p", "1e-30"), ("min_p", "1e-400"), ("user", "1e400"),
                           ("user", "18446744073709551616")):
            st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), field, raw))
            self.assertEqual(st, 200, "%s: %s: %r" % (field, raw, body))

    def test_unserved_fields_are_refused_by_name(self):
        comp = [("echo", True), ("best_of", 2), ("suffix", "x"), ("min_tokens", 3), ("ignore_eos", True),
                ("stop_token_ids", [1]), ("use_beam_search", True), ("echo", "yes"), ("best_of", 1.5)]
        chat = [("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
                ("functions", [{"name": "f"}]), ("function_call", {"name": "f"}),
                ("modalities", ["text", "audio"]), ("audio", {"voice": "alloy"}), ("web_search_options", {}),
                ("guided_json", {}), ("chat_template", "x"), ("add_generation_prompt", False),
                ("continue_final_message", True)]
        for path, cases, base in ((COMPLETIONS, comp, self.base()),
                                  (CHAT, chat, {"model": model_id(), "messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 2})):
            for field, v in cases:
                st, body = http_json("POST", path, dict(base, **{field: v}))
                self.assert_param(st, body, field, "%s %s=%r" % (path, field, v))
                self.assertEqual(body["error"]["code"], "unsupported_parameter")
        # response_format is served (test_structured.py); a malformed one names its place
        for v, param in (({"type": "json_schema"}, "response_format.json_schema"), ({"type": "xml"}, "response_format")):
            st, body = http_json("POST", CHAT, {"model": model_id(), "messages": [{"role": "user", "content": "hi"}],
                                                "max_tokens": 2, "response_format": v})
            self.assert_param(st, body, param, "response_format %r" % v)
        # a tool call asked for with no tools offered names tool_choice (test_tools.py has the rest)
        st, body = http_json("POST", CHAT, {"model": model_id(), "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 2, "tool_choice": "required"})
        self.assert_param(st, body, "tool_choice", "tool_choice required without tools")
        # their off values, and the fields that change nothing in the answer, pass
        st, body = http_json("POST", COMPLETIONS, dict(self.base(), echo=False, best_of=1, suffix="", user="u",
                                                       min_tokens=0, ignore_eos=False, stop_token_ids=[]))
        self.assertEqual(st, 200, body)
        st, body = http_json("POST", CHAT, {"model": model_id(), "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 2, "tools": [], "tool_choice": "none",
                                            "response_format": {"type": "text"}, "modalities": ["text"],
                                            "parallel_tool_calls": False, "user": "u", "metadata": {"a": "b"},
                                            "store": False, "audio": None, "add_generation_prompt": True})
        self.assertEqual(st, 200, body)
        for kw in (dict(echo=True), dict(best_of=3), dict(suffix=" and so on")):
            with self.assertRaises(openai.BadRequestError, msg=repr(kw)) as cm:
                client().completions.create(model=model_id(), prompt="Hi", max_tokens=2, **kw)
            self.assertIn(list(kw)[0], str(cm.exception))
        with self.assertRaises(openai.BadRequestError):
            client().chat.completions.create(model=model_id(), messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                             modalities=["audio"])
        self.assert_serving("unserved fields")

    def test_nul_in_strings(self):
        # a prompt takes NUL, tokenised as the CLI tokenises the same bytes
        st, body = http_json("POST", "/tokenize", b'{"prompt": "a\\u0000b"}')
        self.assertEqual(st, 200, "/tokenize with \\u0000: %r" % (body,))
        cli = subprocess.run([BIN, "--model", MODEL_FILE, "--tokenize"], input=b"a\x00b", capture_output=True, timeout=120)
        self.assertEqual(cli.returncode, 0, cli.stderr)
        self.assertEqual(body["tokens"], [int(x) for x in cli.stdout.split()], "/tokenize vs radiance --tokenize")
        st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), "prompt", '"a\\u0000b"'))
        self.assertEqual(st, 200, "a completion prompt with \\u0000: %r" % (body,))
        self.assertEqual(body["usage"]["prompt_tokens"], len(cli.stdout.split()))
        st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), "prompt", '["x", "a\\u0000b"]'))
        self.assertEqual(st, 200, "an array prompt with \\u0000: %r" % (body,))
        # where the string becomes a C string downstream, NUL is refused by name, never cut
        chat = {"model": model_id(), "max_tokens": 2}
        for field, raw, param in (("messages", '[{"role": "user", "content": "a\\u0000b"}]', "messages[0].content"),
                                  ("messages", '[{"role": "user", "content": [{"type": "text", "text": "\\u0000"}]}]',
                                   "messages[0].content[0].text"),
                                  ("messages", '[{"role": "user\\u0000x", "content": "hi"}]', "messages[0].role")):
            st, body = http_json("POST", CHAT, with_raw(chat, field, raw))
            self.assert_param(st, body, param, "chat %s" % raw)
            st, body = http_json("POST", "/tokenize", ('{"%s": %s}' % (field, raw)).encode())
            self.assert_param(st, body, param, "/tokenize %s" % raw)
        st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), "stop", '["a\\u0000"]'))
        self.assert_param(st, body, "stop[0]", "stop with \\u0000")
        st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), "model", '"%s\\u0000x"' % model_id()))
        self.assert_param(st, body, "model", "model with \\u0000")
        st, body = http_json("POST", COMPLETIONS, with_raw(self.base(), "x\\u0000y", "1"))
        assert_openai_error(self, st, body, 400, "a key with \\u0000")
        self.assertNotIn("not valid JSON", body["error"]["message"])
        self.assert_serving("\\u0000 in strings")
