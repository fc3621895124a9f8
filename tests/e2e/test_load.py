"""A bounded loopback load test (the server runs with --deterministic): 64 concurrent streams with
mixed prompt lengths all complete, each with the text the same request gets when run alone; and one
request alone vs among 15 others, token for token and logprob for logprob."""
import asyncio
import time

from common import CTX, E2E, QUICK, TIMEOUT, async_client, model_id, tokenize

# public-domain text (Moby-Dick, ch. 1) to cut prompts of many lengths from
TEXT = ("Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my "
        "purse, and nothing particular to interest me on shore, I thought I would sail about a little and see "
        "the watery part of the world. It is a way I have of driving off the spleen and regulating the "
        "circulation. Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly "
        "November in my soul; whenever I find myself involuntarily pausing before coffin warehouses, and "
        "bringing up the rear of every funeral I meet; and especially whenever my hypos get such an upper "
        "hand of me, that it requires a strong moral principle to prevent me from deliberately stepping into "
        "the street, and methodically knocking people's hats off, then, I account it high time to get to sea "
        "as soon as I can. This is my substitute for pistol and ball. With a philosophical flourish Cato "
        "throws himself upon his sword; I quietly take to the ship. There is nothing surprising in this.")
WORDS = TEXT.split()
N_STREAMS = 64
MAX_TOK = 2 if QUICK else 10
# how many of the 64 are also run alone, one at a time, to compare (all but on the sanitizer build)
N_ALONE = 8 if QUICK else N_STREAMS


def request(i):
    """The i-th request of the load: mixed lengths (3 to 72 words; 3 to 20 on the sanitizer
    build), kinds and sampling."""
    n_words = 3 + (i * 37) % (18 if QUICK else 70)
    start = (i * 13) % 40
    words = (WORDS[start:] + WORDS)[:n_words]
    kw = {"model": model_id(), "max_tokens": MAX_TOK + i % 5}
    if i % 2:
        kw.update(temperature=0.8, seed=1000 + i, top_p=0.95)
    else:
        kw.update(temperature=0)
    if i % 4 == 3:
        return "chat", dict(kw, messages=[{"role": "user", "content": " ".join(words)}])
    return "completion", dict(kw, prompt=" ".join(words))


async def run_one(cl, kind, kw, first_token=None):
    """Streams one request; returns (text, finish_reason, usage)."""
    text, finish, usage = "", None, None
    if kind == "chat":
        s = await cl.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
        async for ch in s:
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                if c.delta.content:
                    text += c.delta.content
                    if first_token and not first_token.is_set():
                        first_token.set()
                if c.finish_reason:
                    finish = c.finish_reason
    else:
        s = await cl.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
        async for ch in s:
            if ch.usage is not None:
                usage = ch.usage
            for c in ch.choices:
                if c.text:
                    text += c.text
                    if first_token and not first_token.is_set():
                        first_token.set()
                if c.finish_reason:
                    finish = c.finish_reason
    return text, finish, usage


class TestLoad(E2E):
    def test_64_streams_equal_alone(self):
        reqs = [request(i) for i in range(N_STREAMS)]
        for kind, kw in reqs:
            if kind == "completion":
                self.assertLess(len(tokenize(kw["prompt"])) + kw["max_tokens"], CTX)

        async def together():
            cl = async_client()
            try:
                return await asyncio.wait_for(
                    asyncio.gather(*(run_one(cl, k, kw) for k, kw in reqs), return_exceptions=True), TIMEOUT)
            finally:
                await cl.close()

        async def alone():
            cl = async_client()
            out = []
            try:
                for k, kw in reqs[:N_ALONE]:
                    out.append(await run_one(cl, k, kw))
            finally:
                await cl.close()
            return out

        async def alone_first(k):
            cl = async_client()
            try:
                return [await run_one(cl, kind, kw) for kind, kw in reqs[:k]]
            finally:
                await cl.close()

        # a few alone before the load too: a prompt's output must not depend on what the server
        # ran before it (the prefix cache holds blocks the load computed in mixed batches)
        first = asyncio.run(alone_first(4 if QUICK else 8))
        t0 = time.time()
        got = asyncio.run(together())
        t1 = time.time()
        errors = [(i, g) for i, g in enumerate(got) if isinstance(g, BaseException)]
        self.assertEqual(errors, [], "%d of %d streams failed" % (len(errors), N_STREAMS))
        for i, (text, finish, usage) in enumerate(got):
            self.assertIn(finish, ("stop", "length"), "stream %d: finish_reason %r" % (i, finish))
            self.assertIsNotNone(usage, "stream %d: no usage chunk" % i)
            self.assertLessEqual(usage.completion_tokens, reqs[i][1]["max_tokens"])
        ref = asyncio.run(alone())
        t2 = time.time()
        diff = [i for i in range(N_ALONE) if got[i][0] != ref[i][0] or got[i][1] != ref[i][1]]
        self.assertEqual(diff, [], "outputs that differ from the same request alone: %s; first: %r vs %r" % (
            diff, got[diff[0]][:2] if diff else None, ref[diff[0]][:2] if diff else None))
        diff = [i for i in range(len(first)) if first[i][:2] != ref[i][:2]]
        self.assertEqual(diff, [], "alone before the load vs alone after it: %s; first: %r vs %r" % (
            diff, first[diff[0]][:2] if diff else None, ref[diff[0]][:2] if diff else None))
        gen = sum(g[2].completion_tokens for g in got)
        print("\n  load: %d streams, %d tokens in %.1f s together (%.1f tok/s); %.1f s one at a time"
              % (N_STREAMS, gen, t1 - t0, gen / max(t1 - t0, 1e-9), t2 - t1), end=" ")

    def test_one_alone_vs_among_15(self):
        probe = dict(model=model_id(), prompt="In a hole in the ground there lived", max_tokens=MAX_TOK + 6,
                     temperature=0.7, seed=42, logprobs=2)
        others = [request(i) for i in range(1, 16)]
        for _, kw in others:  # long enough to overlap the probe from start to end
            kw["max_tokens"] = MAX_TOK + 10

        async def probe_run(cl):
            toks, lps, top = [], [], []
            s = await cl.completions.create(stream=True, **probe)
            async for ch in s:
                for c in ch.choices:
                    if c.logprobs is not None and c.logprobs.tokens:
                        toks += c.logprobs.tokens
                        lps += c.logprobs.token_logprobs
                        top += [sorted(d.items()) for d in c.logprobs.top_logprobs]
            return toks, lps, top

        async def alone():
            cl = async_client()
            try:
                return await probe_run(cl)
            finally:
                await cl.close()

        async def among(join_late):
            cl = async_client()
            try:
                evs = [asyncio.Event() for _ in others]
                tasks = [asyncio.create_task(run_one(cl, k, kw, ev)) for (k, kw), ev in zip(others, evs)]
                if join_late:  # the probe's prefill lands in steps that decode the others
                    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in evs[:8])), TIMEOUT)
                p = await asyncio.wait_for(probe_run(cl), TIMEOUT)
                rest = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), TIMEOUT)
                bad = [r for r in rest if isinstance(r, BaseException)]
                self.assertEqual(bad, [], "other streams failed")
                return p
            finally:
                await cl.close()

        a = asyncio.run(alone())
        self.assertTrue(a[0], "the probe generated nothing")
        for late in ((True,) if QUICK else (False, True)):
            b = asyncio.run(among(late))
            what = "joined late" if late else "started together"
            self.assertEqual(b[0], a[0], "tokens alone vs among 15 (%s)" % what)
            self.assertEqual(b[1], a[1], "logprobs alone vs among 15 (%s): not bit-identical" % what)
            self.assertEqual(b[2], a[2], "top_logprobs alone vs among 15 (%s)" % what)
