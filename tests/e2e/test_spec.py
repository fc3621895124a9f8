"""Speculative decoding through the openai client: servers of this suite's own with prompt lookup
(--spec ngram) and with a draft model (--draft, the default model drafting for itself). Greedy
text, streamed or not, one request or several batched, equals the main server's (no
speculation; both --deterministic); /metrics counts drafted and accepted tokens; a request's
"speculative": false drafts nothing; the start-up refusals name the flag."""
import concurrent.futures
import subprocess
import unittest

from common import BIN, MODEL_FILE, NTOK, PORT, QUICK, Server, client, http, model_id, parse_metrics, total

PROMPTS = [
    "Copy the list: apple, pear, plum, fig, kiwi, lime.\nThe list: apple, pear,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "The capital of France is",
]
N = 2 if QUICK else len(PROMPTS)
GEN = NTOK + 8


def complete(url, prompt, stream=False, extra=None):
    c = client(url=url)
    kw = dict(model=model_id(), prompt=prompt, max_tokens=GEN, temperature=0, extra_body=extra or {})
    if not stream:
        return c.completions.create(**kw).choices[0].text
    return "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))


def spec_counts(port):
    r = http("GET", "/metrics", port=port)
    fams = parse_metrics(r.body.decode())
    return total(fams, "radiance_spec_draft_tokens_total"), total(fams, "radiance_spec_accepted_tokens_total")


class SpecServer:
    name, args = "", ()

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(cls.name, "--max-seqs", "4", *cls.args).ready()
        # the reference: the main server (no speculation), greedy, one request at a time
        cls.want = [complete("http://127.0.0.1:%d" % PORT, p) for p in PROMPTS[:N]]

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        if rc != 0:
            raise AssertionError("the %s server exited %r on SIGTERM:\n%s" % (cls.name, rc, cls.srv.tail()))

    def test_greedy_text_is_the_targets(self):
        d0, a0 = spec_counts(self.srv.port)
        for i, p in enumerate(PROMPTS[:N]):
            self.assertEqual(complete(self.srv.url, p), self.want[i], "prompt %d" % i)
            self.assertEqual(complete(self.srv.url, p, stream=True), self.want[i], "prompt %d, streamed" % i)
        d1, a1 = spec_counts(self.srv.port)
        self.assertGreater(d1, d0, "no token was drafted")
        self.assertGreater(a1, a0, "no drafted token was accepted")
        self.assertLessEqual(a1 - a0, d1 - d0)
        fams = parse_metrics(http("GET", "/metrics", port=self.srv.port).body.decode())
        self.assertEqual(fams["radiance_spec_acceptance_rate"]["type"], "gauge")
        rate = total(fams, "radiance_spec_acceptance_rate")
        self.assertTrue(0 < rate <= 1, rate)

    def test_batched_requests_each_give_their_own_text(self):
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futs = [ex.submit(complete, self.srv.url, PROMPTS[i % N], i % 2 == 1) for i in range(8)]
            for i, f in enumerate(futs):
                self.assertEqual(f.result(), self.want[i % N], "request %d" % i)

    def test_a_request_may_opt_out(self):
        d0, _ = spec_counts(self.srv.port)
        self.assertEqual(complete(self.srv.url, PROMPTS[0], extra={"speculative": False}), self.want[0])
        d1, _ = spec_counts(self.srv.port)
        self.assertEqual(d1, d0, "a request with \"speculative\": false was drafted for")
        st = http("POST", "/v1/completions", {"model": model_id(), "prompt": "x", "speculative": "no"}, port=self.srv.port)
        self.assertEqual(st.status, 400, st.body)
        self.assertIn(b"speculative", st.body)


class TestSpecNgram(SpecServer, unittest.TestCase):
    name, args = "spec-ngram", ("--spec", "ngram", "--spec-depth", "4")


class TestSpecDraft(SpecServer, unittest.TestCase):
    name, args = "spec-draft", ("--draft", MODEL_FILE, "--spec-depth", "3")


class TestSpecRefusals(unittest.TestCase):
    def run_bin(self, *args):
        p = subprocess.run([BIN, "--model", MODEL_FILE] + list(args), capture_output=True, text=True, timeout=120)
        return p.returncode, p.stderr.strip().splitlines()

    def test_flags_refused_by_name(self):
        for args, code, word in ((["--spec-depth", "3", "-p", "x"], 2, "--spec-depth"),
                                 (["--spec", "medusa", "-p", "x"], 2, "--spec"),
                                 (["--spec-depth", "17", "--spec", "ngram", "-p", "x"], 2, "--spec-depth"),
                                 (["--draft", MODEL_FILE, "--spec", "ngram", "-p", "x"], 2, "--draft"),
                                 (["--draft", "build/e2e/no-such.rad", "-p", "x", "-n", "2"], 1, "no-such.rad")):
            rc, err = self.run_bin(*args)
            self.assertEqual(rc, code, (args, err))
            self.assertEqual(len(err), 1, (args, err))
            self.assertIn(word, err[0], args)


if __name__ == "__main__":
    unittest.main()
