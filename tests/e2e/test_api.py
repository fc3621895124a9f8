"""The API as the official `openai` client sees it: completions and chat, streaming and not,
n > 1, stop strings, seeds, logprobs, usage, /v1/models, /health, /tokenize and /detokenize."""
import math

from common import (E2E, NTOK, QUICK, client, detokenize, http, http_json, model_id,
                    tokenize)

PROMPT = "The capital of France is"
CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name three colours."}]


def collect_completion_stream(stream):
    """Texts by choice index, finish reasons by index, the usage chunk (if any), chunk count."""
    texts, finish, usage, n, usage_before_end = {}, {}, None, 0, []
    for ch in stream:
        n += 1
        if ch.usage is not None:
            if ch.choices:
                usage_before_end.append(ch.usage)
            usage = ch.usage
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + (c.text or "")
            if c.finish_reason is not None:
                finish[c.index] = c.finish_reason
    return texts, finish, usage, n, usage_before_end


def collect_chat_stream(stream):
    texts, finish, usage, roles, n = {}, {}, None, {}, 0
    for ch in stream:
        n += 1
        if ch.usage is not None:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.role is not None:
                roles.setdefault(c.index, c.delta.role)
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason is not None:
                finish[c.index] = c.finish_reason
    return texts, finish, usage, roles, n


class TestModelsHealth(E2E):
    def test_health(self):
        r = http("GET", "/health")
        self.assertEqual(r.status, 200, r.body)

    def test_models(self):
        ms = client().models.list()
        ids = [m.id for m in ms.data]
        self.assertEqual(len(ids), 1, ids)
        m = ms.data[0]
        self.assertEqual(m.object, "model")
        self.assertIsInstance(m.owned_by, str)
        self.assertIsInstance(m.created, int)
        st, body = http_json("GET", "/v1/models")
        self.assertEqual(body.get("object"), "list", body)


class TestCompletions(E2E):
    def test_basic(self):
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id)
        self.assertEqual(r.model, model_id())
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual(c.index, 0)
        self.assertTrue(c.text, "empty completion")
        self.assertIn(c.finish_reason, ("stop", "length"))
        u = r.usage
        self.assertEqual(u.prompt_tokens, len(tokenize(PROMPT)), "usage.prompt_tokens vs /tokenize")
        self.assertGreaterEqual(u.completion_tokens, 1)
        self.assertLessEqual(u.completion_tokens, NTOK)
        if c.finish_reason == "length":
            self.assertEqual(u.completion_tokens, NTOK)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)

    def test_stream_equals_nonstream(self):
        kw = dict(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0)
        whole = client().completions.create(**kw)
        texts, finish, usage, n, early = collect_completion_stream(client().completions.create(
            stream=True, stream_options={"include_usage": True}, **kw))
        self.assertEqual(texts.get(0), whole.choices[0].text)
        self.assertEqual(finish.get(0), whole.choices[0].finish_reason)
        self.assertGreater(n, 2, "a stream of %d chunks is not streaming" % n)
        self.assertIsNotNone(usage, "stream_options.include_usage: no usage chunk")
        self.assertEqual(early, [], "usage on a chunk that carries choices")
        self.assertEqual((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
                         (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens))

    def test_stream_without_usage(self):
        _, finish, usage, _, _ = collect_completion_stream(client().completions.create(
            model=model_id(), prompt=PROMPT, max_tokens=4, temperature=0, stream=True))
        self.assertIsNone(usage, "usage sent without stream_options.include_usage")
        self.assertIn(finish.get(0), ("stop", "length"))

    def test_length(self):
        r = client().completions.create(model=model_id(), prompt="1, 2, 3, 4, 5,", max_tokens=3, temperature=0)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 3)

    def test_prompt_as_token_ids(self):
        ids = tokenize(PROMPT)
        a = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=6, temperature=0)
        b = client().completions.create(model=model_id(), prompt=ids, max_tokens=6, temperature=0)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        self.assertEqual(b.usage.prompt_tokens, len(ids))


class TestChat(E2E):
    def test_basic(self):
        r = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, model_id())
        m = r.choices[0].message
        self.assertEqual(m.role, "assistant")
        self.assertTrue(m.content, "empty reply")
        self.assertNotIn("<|im_end|>", m.content)
        self.assertNotIn("<|im_start|>", m.content)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        # the rendered conversation is longer than its words
        words = len(tokenize(CHAT[0]["content"])) + len(tokenize(CHAT[1]["content"]))
        self.assertGreater(r.usage.prompt_tokens, words)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_stream_equals_nonstream(self):
        kw = dict(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=0)
        whole = client().chat.completions.create(**kw)
        texts, finish, usage, roles, n = collect_chat_stream(client().chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **kw))
        self.assertEqual(roles.get(0), "assistant", "the first delta names the role")
        self.assertEqual(texts.get(0), whole.choices[0].message.content)
        self.assertEqual(finish.get(0), whole.choices[0].finish_reason)
        self.assertIsNotNone(usage, "stream_options.include_usage: no usage chunk")
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, whole.usage.prompt_tokens)

    def test_chunk_objects(self):
        for ch in client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=4,
                                                   temperature=0, stream=True):
            self.assertEqual(ch.object, "chat.completion.chunk")
            self.assertEqual(ch.model, model_id())

    def test_multi_turn(self):
        msgs = CHAT + [{"role": "assistant", "content": "Red, green and blue."},
                       {"role": "user", "content": "Two more?"}]
        r = client().chat.completions.create(model=model_id(), messages=msgs, max_tokens=4, temperature=0)
        one = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=4, temperature=0)
        self.assertGreater(r.usage.prompt_tokens, one.usage.prompt_tokens + 8)


class TestN(E2E):
    def test_completions_n3_greedy_all_equal(self):
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0, n=3)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertEqual(len({c.text for c in r.choices}), 1, [c.text for c in r.choices])

    def test_completions_n3_sampled(self):
        r = client().completions.create(model=model_id(), prompt="Once upon a time", max_tokens=NTOK,
                                        temperature=1.0, n=3, seed=11, logprobs=1)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertGreater(len({c.text for c in r.choices}), 1, "n=3 at temperature 1: all the same")
        listed = sum(len(c.logprobs.tokens) for c in r.choices)
        stopped = sum(c.finish_reason == "stop" for c in r.choices)
        self.assertTrue(listed <= r.usage.completion_tokens <= listed + stopped,
                        "usage.completion_tokens %d is not the sum over the choices (%d listed)" % (r.usage.completion_tokens, listed))
        self.assertEqual(r.usage.prompt_tokens, len(tokenize("Once upon a time")), "the prompt counts once")

    def test_completions_n2_stream(self):
        kw = dict(model=model_id(), prompt="Once upon a time", max_tokens=NTOK, temperature=0.8, n=2, seed=5)
        whole = client().completions.create(**kw)
        texts, finish, usage, _, _ = collect_completion_stream(client().completions.create(
            stream=True, stream_options={"include_usage": True}, **kw))
        self.assertEqual(sorted(texts), [0, 1])
        self.assertEqual(sorted(finish), [0, 1], "each choice ends with a finish_reason")
        for c in whole.choices:
            self.assertEqual(texts[c.index], c.text, "choice %d: stream vs not" % c.index)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)

    def test_chat_n2(self):
        r = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=1.0,
                                             n=2, seed=3)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        for c in r.choices:
            self.assertEqual(c.message.role, "assistant")
        texts, finish, _, roles, _ = collect_chat_stream(client().chat.completions.create(
            model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=1.0, n=2, seed=3, stream=True))
        self.assertEqual(roles, {0: "assistant", 1: "assistant"})
        for c in r.choices:
            self.assertEqual(texts[c.index], c.message.content)


class TestSeed(E2E):
    def test_same_seed_same_text(self):
        kw = dict(model=model_id(), prompt="My favourite animal is", max_tokens=NTOK, temperature=0.9, top_p=0.95)
        a = client().completions.create(seed=1234, **kw).choices[0].text
        b = client().completions.create(seed=1234, **kw).choices[0].text
        self.assertEqual(a, b)
        s = collect_completion_stream(client().completions.create(seed=1234, stream=True, **kw))[0][0]
        self.assertEqual(a, s, "streamed with the same seed")

    def test_different_seeds_differ(self):
        kw = dict(model=model_id(), prompt="My favourite animal is", max_tokens=NTOK, temperature=1.0)
        texts = [client().completions.create(seed=s, **kw).choices[0].text for s in (1, 2, 3, 4)]
        self.assertGreater(len(set(texts)), 1, "four seeds, one text: %r" % texts)

    def test_chat_seed(self):
        kw = dict(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=0.9)
        a = client().chat.completions.create(seed=99, **kw).choices[0].message.content
        b = client().chat.completions.create(seed=99, **kw).choices[0].message.content
        self.assertEqual(a, b)

    def test_sampling_params_accepted(self):
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=4, temperature=0.7, seed=1,
                                        top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5,
                                        extra_body={"top_k": 20, "min_p": 0.05})
        self.assertEqual(len(r.choices), 1)

    def test_logit_bias(self):
        # banning the greedy first token changes the first token
        base = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1)
        first = base.choices[0].logprobs.tokens[0]
        tid = tokenize(first)
        self.assertEqual(len(tid), 1, "the first token %r re-tokenises as %r" % (first, tid))
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=1, temperature=0,
                                        logit_bias={str(tid[0]): -100})
        self.assertNotEqual(r.choices[0].text, base.choices[0].text)


class TestStop(E2E):
    def _greedy_with_tokens(self, prompt, n):
        r = client().completions.create(model=model_id(), prompt=prompt, max_tokens=n, temperature=0, logprobs=1)
        c = r.choices[0]
        self.assertEqual("".join(c.logprobs.tokens), c.text, "logprobs.tokens do not spell the text")
        return c.text, c.logprobs.tokens

    def _check_stop(self, prompt, stop, full, n):
        want = full[: full.find(stop)]
        r = client().completions.create(model=model_id(), prompt=prompt, max_tokens=n, temperature=0, stop=stop)
        c = r.choices[0]
        self.assertEqual(c.text, want, "stop %r" % (stop,))
        self.assertEqual(c.finish_reason, "stop")
        s = client().completions.create(model=model_id(), prompt=prompt, max_tokens=n, temperature=0, stop=stop,
                                        stream=True)
        texts, finish, _, _, _ = collect_completion_stream(s)
        self.assertEqual(texts.get(0, ""), want, "streamed, stop %r" % (stop,))
        self.assertEqual(finish.get(0), "stop")

    def test_stop_across_token_boundary(self):
        prompt = "The days of the week are Monday, Tuesday, Wednesday,"
        full, toks = self._greedy_with_tokens(prompt, 16)
        # a stop string that starts inside one token and ends inside a later one
        off = 0
        cand = None
        for i in range(1, len(toks) - 1):
            off += len(toks[i - 1])
            if len(toks[i - 1]) >= 2 and len(toks[i]) >= 2 and off >= 3:
                cand = full[off - 1: off + 2]
                if full.find(cand) == off - 1:
                    break
                cand = None
        self.assertIsNotNone(cand, "no token boundary to test in %r" % toks)
        self._check_stop(prompt, cand, full, 16)

    def test_stop_list_first_match_wins(self):
        full, toks = self._greedy_with_tokens(PROMPT, NTOK)
        a, b = full[1:3], full[len(full) // 2: len(full) // 2 + 2]
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0,
                                        stop=[b, a, "never-seen-zzz"])
        self.assertEqual(r.choices[0].text, full[: min(full.find(a), full.find(b))])

    def test_stop_never_seen(self):
        full, _ = self._greedy_with_tokens(PROMPT, NTOK)
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0,
                                        stop=["@@@@", "never-seen"])
        self.assertEqual(r.choices[0].text, full)

    def test_stop_chat(self):
        kw = dict(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=0)
        full = client().chat.completions.create(**kw).choices[0].message.content
        self.assertGreater(len(full), 4)
        stop = full[2:5]
        r = client().chat.completions.create(stop=[stop], **kw)
        self.assertEqual(r.choices[0].message.content, full[: full.find(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        texts, finish, _, _, _ = collect_chat_stream(client().chat.completions.create(stop=[stop], stream=True, **kw))
        self.assertEqual(texts.get(0, ""), full[: full.find(stop)])


class TestLogprobs(E2E):
    def _check_top(self, chosen_tok, chosen_lp, top, k, greedy):
        """top: [(token, logprob)] as sent."""
        self.assertTrue(1 <= len(top) <= k, "top of %d, asked %d" % (len(top), k))
        lps = [lp for _, lp in top]
        self.assertEqual(lps, sorted(lps, reverse=True), "top not sorted: %r" % top)
        for lp in lps:
            self.assertTrue(lp <= 0 and math.isfinite(lp), lp)
        self.assertLessEqual(sum(math.exp(lp) for lp in lps), 1.0 + 1e-3)
        self.assertLessEqual(chosen_lp, lps[0] + 1e-5)
        if greedy:
            self.assertIn(chosen_tok, [t for t, _ in top], "greedy choice not among the top")
            self.assertAlmostEqual(chosen_lp, lps[0], delta=1e-4)

    def test_completions(self):
        k = 5
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0, logprobs=k)
        lp = r.choices[0].logprobs
        n = len(lp.tokens)
        self.assertIn(r.usage.completion_tokens, (n, n + 1) if r.choices[0].finish_reason == "stop" else (n,))
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        if lp.text_offset is not None:
            self.assertEqual(len(lp.text_offset), n)
            self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        for tok, tlp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertTrue(tlp <= 0 and math.isfinite(tlp), tlp)
            self._check_top(tok, tlp, list(top.items()), k, True)
        # greedy: the first token of " Paris" is likely; its probability should be substantial
        self.assertGreater(lp.token_logprobs[0], math.log(0.05))

    def test_completions_logprobs_zero(self):
        # logprobs=0: each token's own logprob, no alternatives
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=4, temperature=0, logprobs=0)
        lp = r.choices[0].logprobs
        self.assertIsNotNone(lp)
        self.assertEqual(len(lp.token_logprobs), len(lp.tokens))
        for tlp in lp.token_logprobs:
            self.assertTrue(tlp <= 0 and math.isfinite(tlp), tlp)
        for top in lp.top_logprobs or []:
            self.assertLessEqual(len(top or {}), 1)

    def test_completions_sampled(self):
        r = client().completions.create(model=model_id(), prompt="Once upon a time", max_tokens=NTOK,
                                        temperature=1.0, seed=2, logprobs=3)
        lp = r.choices[0].logprobs
        for tok, tlp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertTrue(tlp <= 0 and math.isfinite(tlp), tlp)
            self._check_top(tok, tlp, list(top.items()), 3, False)

    def test_completions_stream_equals_nonstream(self):
        kw = dict(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0, logprobs=2)
        whole = client().completions.create(**kw).choices[0].logprobs
        toks, lps = [], []
        for ch in client().completions.create(stream=True, **kw):
            for c in ch.choices:
                if c.logprobs is not None and c.logprobs.tokens:
                    toks += c.logprobs.tokens
                    lps += c.logprobs.token_logprobs
        self.assertEqual(toks, whole.tokens)
        for a, b in zip(lps, whole.token_logprobs):
            self.assertAlmostEqual(a, b, delta=1e-5)

    def test_chat(self):
        k = 3
        r = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=NTOK, temperature=0,
                                             logprobs=True, top_logprobs=k)
        content = r.choices[0].logprobs.content
        n = r.usage.completion_tokens
        # an end-of-turn token ends the reply: counted in usage, it may or may not be listed
        want = (n, n - 1) if r.choices[0].finish_reason == "stop" else (n,)
        self.assertIn(len(content), want, "logprobs.content: %d entries, usage %d" % (len(content), n))
        text = ""
        for e in content:
            self.assertTrue(e.logprob <= 0 and math.isfinite(e.logprob))
            self.assertEqual(len(e.top_logprobs), k)
            self._check_top(e.token, e.logprob, [(t.token, t.logprob) for t in e.top_logprobs], k, True)
            if e.bytes is not None:
                self.assertEqual(bytes(e.bytes).decode("utf-8", "replace"), e.token)
            text += e.token
        self.assertTrue(r.choices[0].message.content.startswith(text) or text.startswith(r.choices[0].message.content))

    def test_chat_logprobs_without_top(self):
        r = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=4, temperature=0,
                                             logprobs=True)
        for e in r.choices[0].logprobs.content:
            self.assertEqual(e.top_logprobs or [], [])

    def test_chat_no_logprobs(self):
        r = client().chat.completions.create(model=model_id(), messages=CHAT, max_tokens=4, temperature=0)
        self.assertIsNone(r.choices[0].logprobs)


class TestTokenize(E2E):
    TEXTS = ["The capital of France is", "Hello, world!\n\n  two spaces", "naïve café — “quotes”",
             "日本の首都は東京です。", "emoji 🦀🚀 and tabs\tend", "<|im_start|>user\nhi<|im_end|>"]

    def test_round_trip(self):
        for t in self.TEXTS:
            ids = tokenize(t)
            self.assertTrue(ids and all(isinstance(i, int) and i >= 0 for i in ids), ids)
            self.assertEqual(detokenize(ids), t, "round trip of %r via %r" % (t, ids))

    def test_counts_match_usage(self):
        for t in self.TEXTS[:3]:
            r = client().completions.create(model=model_id(), prompt=t, max_tokens=1, temperature=0)
            self.assertEqual(r.usage.prompt_tokens, len(tokenize(t)), t)

    def test_detokenize_generation(self):
        r = client().completions.create(model=model_id(), prompt=PROMPT, max_tokens=NTOK, temperature=0)
        ids = tokenize(PROMPT + r.choices[0].text)
        self.assertEqual(detokenize(ids), PROMPT + r.choices[0].text)

    def test_bad_ids(self):
        st, body = http_json("POST", "/detokenize", {"tokens": [10 ** 9]})
        self.assertEqual(st, 400, body)
        st, body = http_json("POST", "/detokenize", {"tokens": "abc"})
        self.assertEqual(st, 400, body)
        st, body = http_json("POST", "/tokenize", {"prompt": 5})
        self.assertEqual(st, 400, body)


if QUICK:
    # the sanitizer run keeps the shapes, not the repetitions
    del TestSeed.test_chat_seed
    del TestChat.test_chunk_objects
