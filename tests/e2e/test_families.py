"""The other families' real checkpoints behind the server, through the real openai client:
Qwen2.5-Coder-0.5B-Instruct (qwen2_ggml) answers chat requests in its own template, streaming
and not, with transformers' greedy reply; Gemma 3 270M (gemma3_ggml, a base model with no chat
template) completes text as transformers does and refuses chat with an error naming why.

The expected texts are the oracle's (tests/fixtures/oracle/meta.json, scripts/gen-oracle.py):
the chat case's prompt is what transformers' apply_chat_template rendered, so equal replies mean
the server rendered the same prompt and ran the same model. Skipped, saying so, where `make
model` did not fetch the checkpoint."""
import json
import os
import subprocess
import unittest

import openai

from common import BIN, LOGDIR, QUICK, ROOT, Server, client

CONVERT = os.path.join(os.path.dirname(BIN), "rad-convert")
if not os.path.exists(CONVERT):
    CONVERT = os.path.join(ROOT, "build", "rad-convert")
META = json.load(open(os.path.join(ROOT, "tests", "fixtures", "oracle", "meta.json"), encoding="utf-8"))
N = 8 if QUICK else 32  # greedy tokens compared (the oracle has 32)


def case(file):
    return next(c for c in META["cases"] if c["file"] == file)


def container(gguf, name):
    """The GGUF converted once into LOGDIR (rad-convert's default: the imported quantisation)."""
    src = os.path.join(ROOT, "models", gguf)
    if not os.path.exists(src):
        raise unittest.SkipTest("%s not fetched (make model)" % src)
    out = os.path.join(LOGDIR, name + ".rad")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        r = subprocess.run([CONVERT, src, "-o", out, "--force"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError("rad-convert %s: %s" % (src, r.stderr))
    return out


def prefix_tokens(text, c, n):
    """The first n tokens' worth of the oracle's continuation: n = 32 is all of it; fewer (the
    sanitizer run) compares a prefix, so the reply must start with what transformers' starts with."""
    return text if n >= c["n_gen"] else None


class QwenChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = container("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen05")
        cls.srv = Server("qwen05", "--kernels", "ref", model=cls.model).ready()
        cls.c = client(cls.srv.url)
        cls.want = case("qwen05-chat.bin")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def messages(self):
        return [{"role": "user", "content": "Write a Python function that reverses a string."}]

    def test_chat_reply_is_transformers_greedy_text(self):
        r = self.c.chat.completions.create(model=self.c.models.list().data[0].id, messages=self.messages(),
                                           max_tokens=N, temperature=0)
        got = r.choices[0].message.content
        self.assertEqual(r.usage.prompt_tokens, self.want["n_prompt"], "the rendered prompt's length differs from "
                         "transformers' apply_chat_template (the default system turn?)")
        if N >= 32:
            self.assertEqual(got, self.want["continuation"])
        else:
            self.assertTrue(self.want["continuation"].startswith(got), (got, self.want["continuation"]))
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_streamed_chat_equals_the_whole_reply(self):
        mid = self.c.models.list().data[0].id
        whole = self.c.chat.completions.create(model=mid, messages=self.messages(), max_tokens=N, temperature=0)
        parts = []
        for ev in self.c.chat.completions.create(model=mid, messages=self.messages(), max_tokens=N, temperature=0,
                                                 stream=True):
            if ev.choices and ev.choices[0].delta.content:
                parts.append(ev.choices[0].delta.content)
        self.assertEqual("".join(parts), whole.choices[0].message.content)

    def test_own_system_message_replaces_the_default(self):
        want = case("qwen05-chat-system.bin")
        msgs = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the boiling point of water at sea level, in degrees Celsius?"}]
        r = self.c.chat.completions.create(model=self.c.models.list().data[0].id, messages=msgs, max_tokens=N,
                                           temperature=0)
        self.assertEqual(r.usage.prompt_tokens, want["n_prompt"])
        self.assertTrue(want["continuation"].startswith(r.choices[0].message.content),
                        (r.choices[0].message.content, want["continuation"]))


class GemmaCompletions(unittest.TestCase):
    """Two KV groups behind continuous batching: the local layers' window group (512 tokens)
    releases blocks as a sequence grows past it, the global group keeps them; prefix-cache hits
    and concurrent sequences must not change a token."""

    @classmethod
    def setUpClass(cls):
        cls.model = container("gemma-3-270m-q4_k_m.gguf", "gemma3")
        cls.srv = Server("gemma3", "--kernels", "ref", "--ctx", "1024", model=cls.model).ready()
        cls.c = client(cls.srv.url)
        cls.mid = cls.c.models.list().data[0].id

    def complete(self, file, n=N):
        want = case(file)
        r = self.c.completions.create(model=self.mid, prompt=want["prompt"], max_tokens=n, temperature=0)
        return r, want

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_completion_is_transformers_greedy_text(self):
        want = case("gemma3-capital.bin")
        r = self.c.completions.create(model=self.c.models.list().data[0].id, prompt="The capital of France is",
                                      max_tokens=N, temperature=0)
        self.assertEqual(r.usage.prompt_tokens, want["n_prompt"], "BOS and the prompt's tokens")
        got = r.choices[0].text
        if N >= 32:
            self.assertEqual(got, want["continuation"])
        else:
            self.assertTrue(want["continuation"].startswith(got), (got, want["continuation"]))

    def test_past_the_window_twice_and_a_cached_prefix(self):
        for _ in range(2):  # the second finds what the first left (the window group released its start)
            r, want = self.complete("gemma3-long.bin")
            self.assertEqual(r.usage.prompt_tokens, want["n_prompt"])
            self.assertTrue(want["continuation"].startswith(r.choices[0].text), (r.choices[0].text, want["continuation"]))
            self.assertGreater(len(r.choices[0].text), 0)
        for i in range(2):  # a short prompt: every group holds its blocks, so the second is a cache hit
            r, want = self.complete("gemma3-list.bin")
            self.assertTrue(want["continuation"].startswith(r.choices[0].text), (r.choices[0].text, want["continuation"]))
            d = r.usage.prompt_tokens_details
            self.assertIsNotNone(d, "usage.prompt_tokens_details is missing")
            if i == 1:
                self.assertGreater(d.cached_tokens or 0, 0, "the repeated short prompt was not served from the prefix cache")

    def test_concurrent_sequences_each_get_their_own_text(self):
        import concurrent.futures
        files = ["gemma3-long.bin", "gemma3-capital.bin", "gemma3-fib.bin", "gemma3-french.bin"]
        with concurrent.futures.ThreadPoolExecutor(len(files)) as ex:
            got = list(ex.map(lambda f: self.complete(f), files))
        for (r, want), f in zip(got, files):
            self.assertTrue(want["continuation"].startswith(r.choices[0].text), (f, r.choices[0].text, want["continuation"]))
            self.assertGreater(len(r.choices[0].text), 0, f)

    def test_chat_on_a_base_model_is_refused_by_name(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.chat.completions.create(model=self.c.models.list().data[0].id,
                                           messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        self.assertIn("chat", str(cm.exception))
        # and the server keeps serving completions
        r = self.c.completions.create(model=self.c.models.list().data[0].id, prompt="Hello", max_tokens=2, temperature=0)
        self.assertEqual(len(r.choices), 1)


if __name__ == "__main__":
    unittest.main()
