"""The server's greedy text equals the oracle's (docs/ORACLE.md): transformers' f32 continuation of
"The capital of France is", and the chat golden's replies, through the HTTP API."""
import json
import os
import subprocess

from common import BIN, E2E, MODEL_FILE, QUICK, ROOT, client, http_json, model_id

ORACLE = os.path.join(ROOT, "tests", "fixtures", "oracle")


class TestOracle(E2E):
    def test_capital_greedy(self):
        # transformers' 32 greedy steps reach EOS at step 29; a server stops there, so the text to
        # compare is the continuation up to the first EOS (smollm2-capital-to-eos.txt)
        with open(os.path.join(ORACLE, "smollm2-capital-to-eos.txt"), "rb") as f:
            want = f.read().decode()
        kw = dict(model=model_id(), prompt="The capital of France is", max_tokens=32, temperature=0)
        r = client().completions.create(**kw)
        got = r.choices[0].text
        if got != want:
            # say whether the server or the engine differs: the one-shot CLI on the same container
            p = subprocess.run([BIN, "--model", MODEL_FILE, "-p", "The capital of France is", "-n", "32",
                                "--temp", "0", "--threads", "2"], capture_output=True, timeout=600)
            self.fail("server greedy %r != oracle %r (the one-shot CLI prints %r)" % (got, want, p.stdout.decode(errors="replace")))
        self.assertEqual(r.choices[0].finish_reason, "stop", "EOS ends the oracle's continuation")
        self.assertIn(r.usage.completion_tokens, (29, 30), "29 tokens, then EOS (counted or not)")
        # streamed: the same bytes
        text = "".join(c.choices[0].text for c in client().completions.create(stream=True, **kw) if c.choices)
        self.assertEqual(text, want)

    def test_chat_golden(self):
        path = os.path.join(ORACLE, "smollm2-chat-golden.json")
        if not os.path.exists(path):
            self.skipTest("no %s" % path)
        with open(path) as f:
            g = json.load(f)
        msgs = []
        turns = g["turns"][:1] if QUICK else g["turns"]
        for t in turns:
            msgs.append({"role": "user", "content": t["user"]})
            r = client().chat.completions.create(model=model_id(), messages=msgs, max_tokens=g["max_new_tokens"],
                                                 temperature=0)
            got = r.choices[0].message.content
            if got != t["reply"]:
                # say what differs: the rendered prompt, or the generation (and is it stable?)
                st, tk = http_json("POST", "/tokenize", {"messages": msgs})
                again = client().chat.completions.create(model=model_id(), messages=msgs,
                                                         max_tokens=g["max_new_tokens"], temperature=0)
                self.fail("turn %r: server %r != golden %r; rendered prompt %s the golden's ids; "
                          "cached_tokens %r; the same request again gives %s" % (
                              t["user"], got, t["reply"],
                              "equals" if st == 200 and tk.get("tokens") == t["prompt_ids"] else "DIFFERS from",
                              getattr(getattr(r.usage, "prompt_tokens_details", None), "cached_tokens", None),
                              "the same" if again.choices[0].message.content == got else
                              repr(again.choices[0].message.content)))
            self.assertEqual(r.usage.prompt_tokens, len(t["prompt_ids"]), "the rendered prompt's length")
            if t.get("stopped_at_im_end"):
                self.assertEqual(r.choices[0].finish_reason, "stop")
            msgs.append({"role": "assistant", "content": t["reply"]})
