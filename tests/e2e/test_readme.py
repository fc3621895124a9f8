"""The first thing a new user sees: the README's streaming-chat snippet (the openai client, model
"smollm2", no sampling parameters) against the container `make run` serves (tests/e2e/run.sh
converts it with the Makefile's MODEL_SETS into a file named smollm2.rad, so the served name is
the README's). Each answer must be non-empty and end by itself (finish_reason "stop") within a
bound, and at least 3 of the 8 must name Paris (4 do: the 135M model often opens with "L'Étoile"). The requests set no sampling parameter, so what is tested is the
container's default sampling; each carries a seed, so the test is the same every run."""
import os
import unittest

import common
from openai import OpenAI

RUN_MODEL = os.environ.get("E2E_RUN_MODEL_FILE", "build/e2e/run/smollm2.rad")
BOUND = 256  # tokens; the answers measured were 8 to 78 (docs/SERVER.md, "The default model's sampling")
SEEDS = range(8)  # the same in quick mode: ~30 tokens each


class TestReadme(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = common.Server("readme", model=RUN_MODEL, deterministic=False).ready()  # make run's flags

    @classmethod
    def tearDownClass(cls):
        cls.srv.kill()

    def test_readme_chat_snippet_answers_and_stops(self):
        client = OpenAI(base_url=self.srv.url + "/v1", api_key="unused", timeout=common.TIMEOUT, max_retries=0)
        paris = 0
        for seed in SEEDS:
            text, finish, n = "", None, 0
            # the README's call, plus a seed (so the run is repeatable) and the usage chunk
            for chunk in client.chat.completions.create(model="smollm2", stream=True, seed=seed,
                                                        stream_options={"include_usage": True},
                                                        messages=[{"role": "user", "content": "What is the capital of France?"}]):
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage:
                    n = chunk.usage.completion_tokens
            self.assertTrue(text.strip(), "seed %d: an empty answer" % seed)
            self.assertEqual(finish, "stop", "seed %d: %d tokens, not ended by the model: %r" % (seed, n, text[:200]))
            self.assertLessEqual(n, BOUND, "seed %d: %d tokens: %r" % (seed, n, text[:200]))
            paris += "Paris" in text
        self.assertGreaterEqual(paris, 3, "%d of %d answers name Paris" % (paris, len(SEEDS)))
        self.assertEqual(self.srv.stop(), 0, "the server's exit after SIGTERM")


if __name__ == "__main__":
    unittest.main()
