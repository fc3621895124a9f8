"""/metrics: the Prometheus text format parses strictly, the issue's series are there, and the
counters move by what a request did."""
from common import E2E, client, http, metrics, model_id, parse_metrics, total, wait_for


# the series the issue names, by their names in docs/SERVER.md
REQUESTS = "radiance_requests_total"              # {endpoint, outcome}
TTFT = "radiance_time_to_first_token_seconds"
ITL = "radiance_inter_token_latency_seconds"
E2E_LAT = "radiance_e2e_request_latency_seconds"
QUEUE = "radiance_queue_depth"
RUNNING = "radiance_running_sequences"
KV_USED, KV_FREE = "radiance_kv_blocks_used", "radiance_kv_blocks_free"
PREFIX_HIT = "radiance_prefix_cache_hit_rate"
PROMPT_TOK, GEN_TOK = "radiance_prompt_tokens_total", "radiance_generation_tokens_total"


def one(tc, fams, name, type):
    tc.assertIn(name, fams, "/metrics: no %s; families: %s" % (name, sorted(fams)))
    tc.assertEqual(fams[name]["type"], type, name)
    return name


class TestMetrics(E2E):
    def test_format(self):
        r = http("GET", "/metrics")
        self.assertEqual(r.status, 200)
        ct = r.headers.get("content-type", "")
        self.assertTrue(ct.startswith("text/plain"), "Content-Type %r" % ct)
        fams = parse_metrics(r.body.decode())
        self.assertTrue(r.body.endswith(b"\n"), "the exposition must end with a newline")
        for name, f in fams.items():
            if f["type"] == "counter":
                self.assertTrue(name.endswith("_total") or any(s[0].endswith("_total") for s in f["samples"]),
                                "counter %s: by convention its samples end in _total" % name)

    def test_series_present(self):
        fams = metrics()
        # the list
        for name, type in ((REQUESTS, "counter"), (TTFT, "histogram"), (ITL, "histogram"), (E2E_LAT, "histogram"),
                           (QUEUE, "gauge"), (RUNNING, "gauge"), (KV_USED, "gauge"), (KV_FREE, "gauge"),
                           (PREFIX_HIT, "gauge"), (PROMPT_TOK, "counter"), (GEN_TOK, "counter")):
            one(self, fams, name, type)
        for name, lab, v in fams[REQUESTS]["samples"]:
            self.assertIn("outcome", lab, "%s%r: no outcome label" % (name, lab))
        h = fams[PREFIX_HIT]["samples"][0][2]
        self.assertTrue(0 <= h <= 1, "%s = %r" % (PREFIX_HIT, h))

    def test_counters_move(self):
        before = metrics()
        gen, prm, req, ttft, e2e = GEN_TOK, PROMPT_TOK, REQUESTS, TTFT, E2E_LAT
        r = client().completions.create(model=model_id(), prompt="Counting: one, two, three,", max_tokens=5,
                                        temperature=0)
        # the request's own accounting is done when its response is; allow the scheduler a moment
        def moved():
            a = metrics()
            return a if total(a, gen) - total(before, gen) >= r.usage.completion_tokens else None
        after = wait_for(moved, 5) or metrics()
        self.assertEqual(total(after, gen) - total(before, gen), r.usage.completion_tokens, gen)
        self.assertEqual(total(after, prm) - total(before, prm), r.usage.prompt_tokens, prm)
        self.assertEqual(total(after, req) - total(before, req), 1, req)
        self.assertEqual(total(after, ttft) - total(before, ttft), 1, ttft)
        self.assertEqual(total(after, e2e) - total(before, e2e), 1, e2e)
        d_itl = total(after, ITL) - total(before, ITL)
        self.assertTrue(1 <= d_itl <= r.usage.completion_tokens, "%s count moved by %r for %d tokens"
                        % (ITL, d_itl, r.usage.completion_tokens))
        outcome = r.choices[0].finish_reason  # "stop" or "length", as the outcome label
        self.assertEqual(total(after, req, endpoint="completions", outcome=outcome)
                         - total(before, req, endpoint="completions", outcome=outcome), 1,
                         '%s{endpoint="completions",outcome="%s"}' % (req, outcome))

    def test_idle_gauges(self):
        fams = metrics()
        run, used, free = RUNNING, KV_USED, KV_FREE
        idle = wait_for(lambda: (lambda m: m if total(m, run) == 0 and total(m, used) == 0 else None)(metrics()), 5)
        self.assertIsNotNone(idle, "idle server: running %r, kv used %r" % (total(fams, run), total(fams, used)))
        self.assertGreater(total(idle, free), 0)
