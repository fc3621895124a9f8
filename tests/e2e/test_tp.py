"""Tensor parallelism through the openai client: a server of this suite's own at --tp 2 (two ranks,
threads of one process, each with its slice of the weights and its own KV). Greedy text, chat
and completions, streamed or not, one request or eight batched, equals the main server's
(--tp 1; both --deterministic); the ready line names the ranks; an impossible split is one line
at start-up naming the plugin, the dimension and N."""
import concurrent.futures
import subprocess
import unittest

from common import BIN, MODEL_FILE, NTOK, PORT, QUICK, Server, client, free_port, model_id

PROMPTS = [
    "The capital of France is",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):",
    "Once upon a time, in a small village by the sea,",
]
N = 2 if QUICK else len(PROMPTS)
GEN = NTOK + 8


def complete(url, prompt, stream=False):
    c = client(url=url)
    kw = dict(model=model_id(), prompt=prompt, max_tokens=GEN, temperature=0)
    if not stream:
        return c.completions.create(**kw).choices[0].text
    return "".join(ch.choices[0].text for ch in c.completions.create(stream=True, **kw))


def chat(url, text, stream=False):
    c = client(url=url)
    kw = dict(model=model_id(), messages=[{"role": "user", "content": text}], max_tokens=GEN, temperature=0)
    if not stream:
        return c.chat.completions.create(**kw).choices[0].message.content
    return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw))


class TestTensorParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server("tp-2", "--max-seqs", "8", "--tp", "2").ready()
        main = "http://127.0.0.1:%d" % PORT
        cls.want = [complete(main, p) for p in PROMPTS[:N]]
        cls.want_chat = chat(main, "What is the capital of France?")

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        if rc != 0:
            raise AssertionError("the tp server exited %r on SIGTERM:\n%s" % (rc, cls.srv.tail()))

    def test_the_ready_line_names_the_ranks(self):
        self.assertIn("tensor parallel over 2 ranks", self.srv.tail())

    def test_greedy_text_is_one_ranks(self):
        for i, p in enumerate(PROMPTS[:N]):
            self.assertEqual(complete(self.srv.url, p), self.want[i], "prompt %d" % i)
            self.assertEqual(complete(self.srv.url, p, stream=True), self.want[i], "prompt %d, streamed" % i)
        self.assertEqual(chat(self.srv.url, "What is the capital of France?"), self.want_chat)
        self.assertEqual(chat(self.srv.url, "What is the capital of France?", stream=True), self.want_chat)

    def test_batched_requests_each_give_their_own_text(self):
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futs = [ex.submit(complete, self.srv.url, PROMPTS[i % N], i % 2 == 1) for i in range(8)]
            for i, f in enumerate(futs):
                self.assertEqual(f.result(), self.want[i % N], "request %d" % i)


class TestTensorParallelRefusal(unittest.TestCase):
    def test_an_impossible_split_is_one_line(self):
        p = subprocess.run([BIN, "--model", MODEL_FILE, "--tp", "32", "--port", str(free_port())], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = [l for l in p.stderr.splitlines() if "does not split" in l]
        self.assertEqual(len(lines), 1, p.stderr)
        for word in ("llama_ggml", "model.n_head", "--tp 32"):
            self.assertIn(word, lines[0])


if __name__ == "__main__":
    unittest.main()
