"""serve_load.py — a small closed-loop load generator for an OpenAI-compatible server (bench/serve.sh).

    python bench/serve_load.py URL MODEL --concurrency 1,8,32 [--max-tokens 64] [--rounds 2]

At each concurrency C, C workers each send `rounds` (at least; C=1 sends 4) streaming
/v1/completions requests one after another: fixed prompts of mixed lengths (round robin),
fixed max_tokens, temperature 0, stream_options.include_usage. Measures, per level:
  - aggregate generated tokens/s: the sum of completion_tokens (the server's usage; counted
    chunks if it sends none) over the wall time from the first request sent to the last done;
  - time to first token (TTFT) p50 and p99: request sent -> first chunk carrying text.
Prints one JSON object per level on stdout. Uses httpx2 (the openai client's HTTP library, in
.venv-e2e), streaming, one connection per worker.
"""
import argparse
import asyncio
import json
import sys
import time

import httpx2

PROMPTS = [
    "Count from one to one hundred in words: one, two, three,",
    "Write a long story about a lighthouse keeper who finds a message in a bottle. Once upon a time,",
    "List the countries of Europe with their capitals, one per line:\n1. France - Paris\n2.",
    "The history of the printing press began in the fifteenth century, when Johannes Gutenberg "
    "combined movable metal type, oil-based inks and a wooden press. In the decades that followed,",
    "Explain, step by step and in detail, how a bicycle gear system works, starting with the chain,",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my "
    "purse, and nothing particular to interest me on shore, I thought I would sail about a little and "
    "see the watery part of the world. It is a way I have of driving off the spleen and regulating the "
    "circulation. Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly "
    "November in my soul; whenever I find myself involuntarily pausing before coffin warehouses, and "
    "bringing up the rear of every funeral I meet; and especially whenever my hypos get such an upper "
    "hand of me, that it requires a strong moral principle to prevent me from deliberately stepping "
    "into the street, and methodically knocking people's hats off, then, I account it high time to",
    "def quicksort(xs):\n    \"\"\"Sorts a list of numbers.\"\"\"\n",
    "Here is a recipe for bread. Ingredients:",
]


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def one(cl, url, model, prompt, max_tokens, extra):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(extra)
    t0 = time.perf_counter()
    ttft, chunks, usage = None, 0, None
    async with cl.stream("POST", url + "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status_code, (await r.aread())[:200]))
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            d = line[5:].strip()
            if d == "[DONE]":
                break
            ev = json.loads(d)
            if ev.get("usage"):
                usage = ev["usage"]
            for c in ev.get("choices") or []:
                if c.get("text"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
    n = usage["completion_tokens"] if usage and usage.get("completion_tokens") else chunks
    return ttft if ttft is not None else time.perf_counter() - t0, n


async def level(url, model, conc, rounds, max_tokens, extra, timeout):
    per_worker = max(rounds, 4) if conc == 1 else rounds
    ttfts, toks = [], []
    nxt = [0]

    async def worker(w):
        async with httpx2.AsyncClient(timeout=timeout, headers={"Authorization": "Bearer bench"}) as cl:
            for _ in range(per_worker):
                i = nxt[0]
                nxt[0] += 1
                t, n = await one(cl, url, model, PROMPTS[i % len(PROMPTS)], max_tokens, extra)
                ttfts.append(t)
                toks.append(n)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(conc)))
    wall = time.perf_counter() - t0
    return {"concurrency": conc, "requests": len(toks), "tokens": sum(toks), "wall_s": round(wall, 3),
            "tok_s": round(sum(toks) / wall, 2), "ttft_p50_ms": round(1000 * pct(ttfts, 50), 1),
            "ttft_p99_ms": round(1000 * pct(ttfts, 99), 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--extra", default="{}", help="JSON merged into every request body")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    extra = json.loads(a.extra)
    # warm-up: one short request, not measured
    async def warm():
        async with httpx2.AsyncClient(timeout=a.timeout) as cl:
            await one(cl, a.url, a.model, PROMPTS[0], 8, extra)
    asyncio.run(warm())
    for c in [int(x) for x in a.concurrency.split(",")]:
        r = asyncio.run(level(a.url, a.model, c, a.rounds, a.max_tokens, extra, a.timeout))
        print(json.dumps(r), flush=True)
        print("  c=%d: %d requests, %d tokens in %.1f s: %.1f tok/s, TTFT p50 %.0f ms p99 %.0f ms"
              % (c, r["requests"], r["tokens"], r["wall_s"], r["tok_s"], r["ttft_p50_ms"], r["ttft_p99_ms"]),
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
