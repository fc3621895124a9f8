"""The server under a tuning table (docs/TUNE.md): rad-tune writes one for the server's options,
the server starts with it and says so, the plan it makes under those options takes the table's
choices (radiance --debug-graph with the server's step bounds), greedy text is what the default
rule's server writes, and a table for other options is refused at start-up naming the option."""
import os
import subprocess
import unittest

from common import BIN, CTX, LOGDIR, MODEL_FILE, QUICK, ROOT, Server, client

# beside the server binary; the sanitizer run's copy of it (run.sh) has none: the release build's,
# which sees the same kernel plugins that copy serves with
TUNE = os.path.join(os.path.dirname(BIN), "rad-tune")
if not os.path.exists(TUNE):
    TUNE = os.path.join(ROOT, "build", "rad-tune")
TABLE = os.path.join(LOGDIR, "e2e.tune")
# the Server class's engine options: --ctx CTX --threads 2 --deterministic, the default step bounds
ENGINE = ["--ctx", str(CTX), "--threads", "2", "--deterministic"]


def model_name(c):
    return c.models.list().data[0].id


class TuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(LOGDIR, exist_ok=True)
        # the norms only: seconds, and libref's simd norm (batch invariant) beats the exact one
        r = subprocess.run([TUNE, "-m", MODEL_FILE, "-o", TABLE, "--kernels", "ref", "--quick", "--ops", "*rmsnorm",
                            "--restart"] + ENGINE, capture_output=True, text=True, timeout=1200 if QUICK else 300)
        if r.returncode != 0:
            raise AssertionError("rad-tune: exit %d\n%s" % (r.returncode, r.stderr))
        cls.tune_err = r.stderr

    def test_the_plan_under_the_servers_bounds_takes_the_table(self):
        self.assertIn("entries", self.tune_err)
        r = subprocess.run([BIN, "--model", MODEL_FILE, "--kernels", "ref", "--max-seqs", "16", "--max-mixed-tok", "512",
                            "--tune", TABLE, "--debug-graph"] + ENGINE, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tuning table " + TABLE, r.stdout)
        self.assertIn("(from the table, line ", r.stdout)

    def test_a_tuned_server_serves_the_default_rules_greedy_text(self):
        tuned = Server("tuned", "--kernels", "ref", "--tune", TABLE).ready()
        plain = Server("untuned", "--kernels", "ref").ready()
        try:
            self.assertIn("kernels from the tuning table " + TABLE, tuned.tail())
            texts = []
            for s in (tuned, plain):
                c = client(s.url)
                r = c.completions.create(model=model_name(c), prompt="The capital of France is", max_tokens=8 if QUICK else 24,
                                         temperature=0)
                texts.append(r.choices[0].text)
            self.assertEqual(texts[0], texts[1])
        finally:
            tuned.stop()
            plain.stop()

    def test_a_table_for_other_options_is_refused_at_start(self):
        s = Server("tune-other", "--kernels", "ref", "--tune", TABLE, "--max-mixed-tok", "256")
        try:
            rc = s.proc.wait(300 if QUICK else 60)
        except subprocess.TimeoutExpired:
            s.kill()
            self.fail("a server with another option set's table started:\n" + s.tail())
        self.assertEqual(rc, 1, s.tail())
        self.assertIn("max_tok", s.tail())
        self.assertIn(TABLE, s.tail())


if __name__ == "__main__":
    unittest.main()
