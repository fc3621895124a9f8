#!/usr/bin/env python3
"""Load for tests/gpu/check.sh: radiance's server at concurrency C, standard library only (the GPU
machine has no openai client; tests/e2e uses the real one on the CPU).

    python3 tests/gpu/serve_load.py URL C REQUESTS MAX_TOKENS

C threads each send /v1/completions requests (a text prompt, temperature 0, max_tokens, not
streamed) until REQUESTS are done. Prints one JSON line: concurrency, requests, failures,
completion tokens, wall seconds, tokens/s, latency p50 and p99 (s).
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def main():
    url, conc, n_req, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    u = urllib.parse.urlparse(url)
    lock = threading.Lock()
    state = {"next": 0, "tokens": 0, "fail": 0, "lat": []}

    def worker():
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        while True:
            with lock:
                i = state["next"]
                if i >= n_req:
                    break
                state["next"] += 1
            body = json.dumps({"model": "m", "prompt": "request %d: the quick brown fox jumps over the lazy dog" % i,
                               "max_tokens": max_tokens, "temperature": 0})
            t0 = time.time()
            try:
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = json.loads(r.read())
                ok = r.status == 200
                n = data.get("usage", {}).get("completion_tokens", 0) if ok else 0
            except Exception:
                ok, n = False, 0
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
            with lock:
                state["lat"].append(time.time() - t0)
                state["tokens"] += n
                state["fail"] += 0 if ok else 1

    t0 = time.time()
    th = [threading.Thread(target=worker) for _ in range(conc)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    lat = sorted(state["lat"]) or [0.0]
    print(json.dumps({"concurrency": conc, "requests": n_req, "failures": state["fail"], "tokens": state["tokens"],
                      "wall_s": round(wall, 3), "tok_s": round(state["tokens"] / wall, 1) if wall > 0 else 0,
                      "p50_s": round(lat[len(lat) // 2], 3), "p99_s": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3)}))


if __name__ == "__main__":
    main()
