"""Structured outputs through the real openai client (docs/SERVER.md "Structured outputs").

response_format json_schema under a dozen schemas at three temperatures (252 replies on the
default model, SmolLM2-135M, which knows nothing of these schemas: every byte it may write is
the grammar's doing): every reply that ends by itself parses and validates with Python's
jsonschema, and at least 200 do (a reply cut at max_tokens is not a value yet; the sanitizer
build asks 84 and wants 60). json_object mode gives a JSON object. Hostile or unsupported
schemas are refused with 400 naming the keyword, and the server goes on serving."""
import json
import unittest

import jsonschema
import openai

from common import QUICK, client, model_id

S = lambda **kw: dict(kw)  # noqa: E731
OBJ = lambda props, req=None: {"type": "object", "properties": props, "required": list(props) if req is None else req,  # noqa: E731
                               "additionalProperties": False}
SCHEMAS = [
    ("weather", OBJ({"city": S(type="string"), "unit": S(type="string", enum=["celsius", "fahrenheit"])})),
    ("person", OBJ({"name": S(type="string"), "age": S(type="integer"), "email": S(type=["string", "null"])})),
    ("flags", OBJ({"ok": S(type="boolean"), "note": S(type="null")})),
    ("numbers", OBJ({"xs": S(type="array", items=S(type="number"), minItems=1, maxItems=4)})),
    ("tags", OBJ({"tags": S(type="array", items=S(type="string", enum=["a", "b", "c"]), maxItems=3)})),
    ("optional", OBJ({"a": S(type="integer"), "b": S(type="string"), "c": S(type="boolean")}, req=["b"])),
    ("nested", OBJ({"user": OBJ({"id": S(type="integer"), "roles": S(type="array", items=S(type="string", enum=["admin", "dev"]),
                                                                          maxItems=2)}), "active": S(type="boolean")})),
    ("anyof", OBJ({"value": {"anyOf": [S(type="integer"), S(type="string", enum=["none", "all"])]}})),
    ("const", OBJ({"version": S(const=2), "kind": S(const="report")})),
    ("defs", {"$defs": {"point": OBJ({"x": S(type="number"), "y": S(type="number")})},
              **OBJ({"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}})}),
    ("list_of_objects", OBJ({"items": S(type="array", items=OBJ({"sku": S(type="string", enum=["x1", "x2"]), "qty": S(type="integer")}),
                                        minItems=1, maxItems=2)})),
    ("mixed_enum", OBJ({"choice": S(enum=[1, "two", None, True, 2.5])})),
]
TEMPS = (0.0, 0.7, 1.0)
N = 3 if QUICK else 10  # choices per sampled request (the sanitizer build: fewer)
WANT = 60 if QUICK else 200


class Structured(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = client()
        cls.id = model_id()

    def test_replies_under_a_dozen_schemas_validate(self):
        done = cut = 0
        for name, schema in SCHEMAS:
            jsonschema.Draft202012Validator.check_schema(schema)
            for t in TEMPS:
                r = self.c.chat.completions.create(
                    model=self.id, messages=[{"role": "user", "content": "Reply with a JSON object for: %s" % name}],
                    response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
                    temperature=t, n=N if t > 0 else 1, max_tokens=400, seed=11)
                for ch in r.choices:
                    if ch.finish_reason == "length":
                        cut += 1
                        continue
                    self.assertEqual(ch.finish_reason, "stop", ch)
                    try:
                        v = json.loads(ch.message.content)
                    except ValueError as ex:
                        self.fail("%s at %s: %r is not JSON: %s" % (name, t, ch.message.content, ex))
                    jsonschema.validate(v, schema)
                    done += 1
        total = len(SCHEMAS) * (1 + N * (len(TEMPS) - 1))
        print("\nstructured: %d of %d replies ended by themselves and validate, %d cut at max_tokens" % (done, total, cut))
        self.assertGreaterEqual(done, WANT, "%d of %d replies ended by themselves (%d cut at max_tokens)" % (done, total, cut))

    def test_json_object_mode_gives_an_object(self):
        for t in (0.0, 1.0):
            r = self.c.chat.completions.create(model=self.id, messages=[{"role": "user", "content": "Describe Paris as JSON."}],
                                               response_format={"type": "json_object"}, temperature=t, max_tokens=300, seed=3)
            ch = r.choices[0]
            if ch.finish_reason == "stop":
                self.assertIsInstance(json.loads(ch.message.content), dict)

    def test_streamed_reply_is_the_whole_one(self):
        kw = dict(model=self.id, messages=[{"role": "user", "content": "JSON please"}], temperature=0, max_tokens=200,
                  response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMAS[0][1]}})
        whole = self.c.chat.completions.create(**kw).choices[0].message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in self.c.chat.completions.create(stream=True, **kw) if ch.choices)
        self.assertEqual(streamed, whole)
        jsonschema.validate(json.loads(whole), SCHEMAS[0][1])

    def test_unsupported_and_hostile_schemas_are_refused_by_name(self):
        deep = {"type": "object"}
        for _ in range(200):
            deep = {"type": "object", "properties": {"a": deep}, "required": ["a"], "additionalProperties": False}
        cases = [
            (OBJ({"s": S(type="string", pattern="^(a+)+$")}), "pattern"),
            (OBJ({"s": S(type="string", format="date-time")}), "format"),
            (OBJ({"n": S(type="integer", minimum=0)}), "minimum"),
            ({"type": "object", "properties": {"a": S(type="string")}, "additionalProperties": True}, "additionalProperties"),
            (OBJ({"e": S(type="string", enum=["v%d" % i for i in range(20000)])}), "enum"),
            (deep, None),
            ({"oneOf": [S(type="string"), S(type="integer")]}, "oneOf"),
        ]
        for schema, word in cases:
            with self.assertRaises(openai.BadRequestError, msg=word) as cm:
                self.c.chat.completions.create(model=self.id, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                               response_format={"type": "json_schema", "json_schema": {"name": "h", "schema": schema}})
            body = cm.exception.body
            self.assertTrue(body.get("param", "").startswith("response_format.json_schema.schema"), body)
            if word:
                self.assertIn(word, body.get("message", ""))
        for bad in ({"type": "xml"}, {"type": "json_schema"}, "json"):
            with self.assertRaises(openai.BadRequestError):
                self.c.chat.completions.create(model=self.id, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                               response_format=bad)
        # and the server still answers
        r = self.c.chat.completions.create(model=self.id, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        self.assertTrue(r.choices)


if __name__ == "__main__":
    unittest.main()
