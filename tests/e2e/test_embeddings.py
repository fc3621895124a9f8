"""Embeddings through the real openai client (docs/SERVER.md "Embeddings").

all-MiniLM-L6-v2 (a sentence-transformers folder, models/all-MiniLM-L6-v2, fetched by `make
model`) converted by rad-convert and served: POST /v1/embeddings against sentence-transformers'
own vectors for the committed sentences (tests/fixtures/embed, scripts/gen-embed-goldens.py):
cosine >= 0.9999 through the client's default base64 and through "float" (the two bit-equal),
token-id input equal to text input, usage, concurrent requests batched by the scheduler; the
refusals both ways (generation on the embedding model, embeddings on the default model) and of
bad inputs, each naming its field; `radiance --embed` for pipelines. Skipped, saying so, where the
folder was not fetched."""
import base64
import concurrent.futures
import ctypes
import ctypes.util
import math
import os
import struct
import subprocess
import unittest

import openai

from common import BIN, ROOT, Server, client, model_id
from test_families import CONVERT, LOGDIR

FOLDER = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
FIX = os.path.join(ROOT, "tests", "fixtures", "embed")


def unzstd(path):
    """libzstd through ctypes (the e2e venv holds only the openai client and jsonschema)."""
    lib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    with open(path, "rb") as fh:
        src = fh.read()
    n = lib.ZSTD_getFrameContentSize(src, len(src))
    assert 0 < n < 1 << 30, "%s: frame size %d" % (path, n)
    dst = ctypes.create_string_buffer(n)
    got = lib.ZSTD_decompress(dst, n, src, len(src))
    assert got == n, "%s: %d of %d bytes" % (path, got, n)
    return dst.raw.decode()


def goldens():
    rows = []
    for line in unzstd(os.path.join(FIX, "minilm.golden.zst")).splitlines():
        if line.startswith("#"):
            continue
        f = line.split()
        rows.append({"ids": [int(x) for x in f[2].split(",")], "v": [float(x) for x in f[3:]]})
    with open(os.path.join(FIX, "sentences.txt"), encoding="utf-8") as fh:
        sents = fh.read().split("\n")[:len(rows)]
    for r, s in zip(rows, sents):
        r["text"] = s
    return rows


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def embedding_container():
    if not os.path.exists(os.path.join(FOLDER, "config.json")):
        raise unittest.SkipTest("%s not fetched (make model)" % FOLDER)
    out = os.path.join(LOGDIR, "minilm.rad")
    if not os.path.exists(out):
        r = subprocess.run([CONVERT, FOLDER, "-o", out, "--force"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError("rad-convert %s: %s" % (FOLDER, r.stderr))
    return out


class MiniLM(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = embedding_container()
        cls.gold = goldens()
        cls.srv = Server("minilm", "--kernels", "ref", model=cls.model).ready()
        cls.c = client(cls.srv.url)
        cls.id = cls.c.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def check(self, data, rows):
        self.assertEqual([d.index for d in data], list(range(len(rows))))
        for d, g in zip(data, rows):
            self.assertEqual(d.object, "embedding")
            self.assertEqual(len(d.embedding), 384)
            c = cosine(d.embedding, g["v"])
            self.assertGreaterEqual(c, 0.9999, "%r: cosine %.7f to sentence-transformers'" % (g["text"][:40], c))

    def test_vectors_match_sentence_transformers(self):
        rows = self.gold[:12]
        r = self.c.embeddings.create(model=self.id, input=[g["text"] for g in rows])  # the client asks base64
        self.check(r.data, rows)
        self.assertEqual(r.model, self.id)
        self.assertEqual(r.usage.prompt_tokens, sum(len(g["ids"]) for g in rows))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens)

    def test_float_and_base64_are_the_same_floats(self):
        g = self.gold[3]
        f = self.c.embeddings.create(model=self.id, input=g["text"], encoding_format="float").data[0].embedding
        raw = self.c.with_raw_response.embeddings.create(model=self.id, input=g["text"], encoding_format="base64")
        b64 = raw.http_response.json()["data"][0]["embedding"]
        self.assertIsInstance(b64, str)
        b = struct.unpack("<384f", base64.b64decode(b64))
        self.assertEqual([struct.pack("<f", x) for x in f], [struct.pack("<f", x) for x in b])

    def test_token_ids_are_taken_as_given(self):
        g = self.gold[7]
        by_text = self.c.embeddings.create(model=self.id, input=g["text"]).data[0].embedding
        by_ids = self.c.embeddings.create(model=self.id, input=[g["ids"]]).data[0].embedding
        self.assertGreaterEqual(cosine(by_text, by_ids), 0.9999999)
        one = self.c.embeddings.create(model=self.id, input=g["ids"]).data  # a flat id list is one input
        self.assertEqual(len(one), 1)

    def test_concurrent_requests_are_batched_and_right(self):
        rows = self.gold[12:36]

        def one(i):
            return i, self.c.embeddings.create(model=self.id, input=[rows[i]["text"], rows[i + 1]["text"]]).data
        with concurrent.futures.ThreadPoolExecutor(12) as ex:
            for i, data in ex.map(one, range(0, len(rows), 2)):
                self.check(data, rows[i:i + 2])

    def test_dimensions(self):
        r = self.c.embeddings.create(model=self.id, input="x", dimensions=384)
        self.assertEqual(len(r.data[0].embedding), 384)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.embeddings.create(model=self.id, input="x", dimensions=128)
        self.assertEqual(cm.exception.body.get("param"), "dimensions", cm.exception.body)
        self.assertIn("Matryoshka", cm.exception.body.get("message"))

    def test_bad_inputs_are_refused_by_name(self):
        for bad, code in (([""], None), ("", None), ([], None), ([[]], None), ([[99999999]], None),
                          (" ".join(["word"] * 300), "context_length_exceeded")):
            with self.assertRaises(openai.BadRequestError, msg=repr(bad)[:60]) as cm:
                self.c.embeddings.create(model=self.id, input=bad)
            self.assertEqual(cm.exception.body.get("param"), "input", cm.exception.body)
            if code:
                self.assertEqual(cm.exception.body.get("code"), code)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.embeddings.create(model=self.id, input="x", encoding_format="hex")
        self.assertEqual(cm.exception.body.get("param"), "encoding_format")

    def test_generation_on_an_embedding_model_is_refused(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.chat.completions.create(model=self.id, messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(cm.exception.body.get("code"), "model_not_supported")
        self.assertIn("/v1/embeddings", cm.exception.body.get("message"))
        with self.assertRaises(openai.BadRequestError):
            self.c.completions.create(model=self.id, prompt="hi", max_tokens=4)
        self.assertIsNone(self.srv.proc.poll(), "the server died")
        self.c.embeddings.create(model=self.id, input="still serving")

    def test_embed_cli_prints_one_vector_per_line(self):
        rows = self.gold[:3]
        r = subprocess.run([BIN, "--model", self.model, "--embed", "--threads", "2"],
                           input="".join(g["text"] + "\n" for g in rows), capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 3)
        for line, g in zip(lines, rows):
            v = [float(x) for x in line.split()]
            self.assertEqual(len(v), 384)
            self.assertGreaterEqual(cosine(v, g["v"]), 0.9999)
        long = subprocess.run([BIN, "--model", self.model, "--embed"], input="ok\n" + "word " * 300 + "\n",
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(long.returncode, 1)
        self.assertEqual(long.stdout, "", "a refused input printed vectors first")
        self.assertIn("line 2", long.stderr)


class EmbeddingGemma(unittest.TestCase):
    """EmbeddingGemma-300M (models/embeddinggemma-300m, `make models`: 1.1 GB, not fetched by
    `make model`, so CI skips this) through the client, against sentence-transformers; its
    Matryoshka sizes as the model card states them (--set pooling.dims=512,256,128)."""

    @classmethod
    def setUpClass(cls):
        folder = os.path.join(ROOT, "models", "embeddinggemma-300m")
        if not os.path.exists(os.path.join(folder, "config.json")):
            raise unittest.SkipTest("%s not fetched (make models)" % folder)
        cls.model = os.path.join(LOGDIR, "embeddinggemma.rad")
        if not os.path.exists(cls.model):
            r = subprocess.run([CONVERT, folder, "-o", cls.model, "--force", "--set", "pooling.dims=512,256,128"],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise AssertionError(r.stderr)
        cls.gold = []
        for line in unzstd(os.path.join(FIX, "embeddinggemma.golden.zst")).splitlines():
            if not line.startswith("#"):
                f = line.split()
                cls.gold.append({"ids": [int(x) for x in f[2].split(",")], "v": [float(x) for x in f[3:]]})
        with open(os.path.join(FIX, "sentences.txt"), encoding="utf-8") as fh:
            for g, t in zip(cls.gold, fh.read().split("\n")):
                g["text"] = t
        cls.srv = Server("embeddinggemma", "--kernels", "ref", model=cls.model).ready()
        cls.c = client(cls.srv.url)
        cls.id = cls.c.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_vectors_match_sentence_transformers(self):
        rows = self.gold[:12]
        r = self.c.embeddings.create(model=self.id, input=[g["text"] for g in rows])
        self.assertEqual(r.usage.prompt_tokens, sum(len(g["ids"]) for g in rows))
        for d, g in zip(r.data, rows):
            self.assertEqual(len(d.embedding), 768)
            c = cosine(d.embedding, g["v"])
            self.assertGreaterEqual(c, 0.9999, "%r: cosine %.7f" % (g["text"][:40], c))
        cut = self.c.embeddings.create(model=self.id, input=rows[0]["text"], dimensions=256).data[0].embedding
        self.assertEqual(len(cut), 256)
        self.assertAlmostEqual(sum(x * x for x in cut), 1.0, delta=1e-5)


class Matryoshka(unittest.TestCase):
    """`dimensions` below the width, where the container lists the size (rad-convert --set
    pooling.dims=256,128): the vector's head, made unit length again."""

    @classmethod
    def setUpClass(cls):
        embedding_container()
        cls.model = os.path.join(LOGDIR, "minilm-dims.rad")
        r = subprocess.run([CONVERT, FOLDER, "-o", cls.model, "--force", "--set", "pooling.dims=256,128"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise AssertionError(r.stderr)
        cls.srv = Server("minilm-dims", "--kernels", "ref", model=cls.model).ready()
        cls.c = client(cls.srv.url)
        cls.id = cls.c.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_cut_and_renormalised(self):
        full = self.c.embeddings.create(model=self.id, input="a cat on a mat", encoding_format="float").data[0].embedding
        cut = self.c.embeddings.create(model=self.id, input="a cat on a mat", dimensions=128,
                                       encoding_format="float").data[0].embedding
        self.assertEqual(len(cut), 128)
        n = math.sqrt(sum(x * x for x in full[:128]))
        for a, b in zip(cut, full[:128]):
            self.assertAlmostEqual(a, b / n, delta=1e-6)
        self.assertAlmostEqual(sum(x * x for x in cut), 1.0, delta=1e-5)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.embeddings.create(model=self.id, input="x", dimensions=100)
        self.assertIn("256, 128", cm.exception.body.get("message"))


class GenerationModel(unittest.TestCase):
    """The default server (SmolLM2, a generation model) refuses /v1/embeddings by name."""

    def test_embeddings_on_a_generation_model_are_refused(self):
        c = client()
        with self.assertRaises(openai.BadRequestError) as cm:
            c.embeddings.create(model=model_id(), input="hello")
        self.assertEqual(cm.exception.body.get("code"), "model_not_supported")
        self.assertIn("no embeddings", cm.exception.body.get("message"))

    def test_embed_cli_on_a_generation_model_is_refused(self):
        r = subprocess.run([os.environ["E2E_BIN"], "--model", os.environ["E2E_MODEL_FILE"], "--embed"], input="hello\n",
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 1)
        self.assertIn("generation model", r.stderr)
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
