#!/usr/bin/env python3
"""Dev-time: tests/fixtures/pyjson/cases.json, what CPython's json.dumps(v, ensure_ascii=False)
writes (Jinja's `tojson` in Hugging Face chat templates), for tests/text/pyjson_test.c.

    python3 scripts/gen-pyjson-goldens.py

Each case: "in", JSON text the test gives jansson, and "out", json.dumps(json.loads(in),
ensure_ascii=False). Standard library only. Every "in" must parse the same way in jansson
(no integers past int64, no reals past the double range: jansson refuses those where Python
takes a big int or inf)."""
import json
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "pyjson", "cases.json")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search_web", "description": "Search the web for a query and return the top results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "What to search for, e.g. \"best café in Paris\""},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
        "safe": {"type": "boolean", "default": True},
        "lang": {"type": ["string", "null"], "enum": ["en", "fr", "日本語", None]},
        "threshold": {"type": "number", "default": 0.5}},
        "required": ["query"], "additionalProperties": False}}}

CASES = [
    # scalars at the top level (JSON_DECODE_ANY)
    "null", "true", "false",
    "0", "-1", "42", "-12", "9007199254740993", "-9007199254740993",
    "9223372036854775807", "-9223372036854775808", "-0",
    # reals: Python's repr(float)
    "0.1", "1.0", "1e5", "1E5", "1e16", "1.5e16", "1e-5", "0.0001", "0.00001", "123.456", "-0.0",
    "5e-324", "1.7976931348623157e308", "2.5", "1e22", "3.14159", "0.30000000000000004",
    "1e15", "1e-4", "0.000123", "1.5e-7", "123456789012345678.0", "9999999999999998.0",
    "1e100", "-1e-100", "1e-300", "2.2250738585072014e-308", "100.0", "1.23e2", "0.5",
    "-2.5e-3", "1e+16", "12345678901234567890.0", "4.35", "1e23", "9007199254740993.0",
    "0.1e1", "10.0e-1",
    # powers of two whose shortest repr is not the nearest 16 or 17 digits
    "5.960464477539063e-08", "5.684341886080802e-14", "6.189700196426902e+26",
    "7.120236347223045e-307",
    # strings
    '""', '"hello"', '"é"', '"日本語"', '"😀"', '"\\ud83d\\ude00"', '"\\u2028 and \\u2029"',
    '"a\\"b"', '"back\\\\slash"', '"a/b</script>"', '"\\/"', '"tab\\there"', '"line\\nbreak\\r\\n"',
    '"\\b\\f"', '"nul\\u0000in the middle"', '"\\u007f"', '"\\u0080\\u00ff"',
    '"\\ufeff BOM"', '"\\uffff"', '"mixed: é\\n\\u0001\\"日本\\\\😀"',
    json.dumps("".join(chr(c) for c in range(0x20)) + "\x7f"),
] + [json.dumps(chr(c)) for c in range(0x20)] + [
    # containers
    "[]", "{}", "[[]]", "[{}]", '{"a": []}', '{"a": {}}',
    "[1, 2, 3]", '[1,2,3]', '[1.0, 2, "3", null, true, false]',
    '{"a":1,"b":2}', '{"b": 1, "a": 2}', '{"z": 0, "y": 1, "x": 2, "w": 3}',
    '{"a": {"b": {"c": {"d": [1, [2, [3, {"e": null}]]]}}}}',
    '[[[[[[[[[[["deep"]]]]]]]]]]]',
    '{"é": "日本語", "😀": ["😀"], "key\\nwith\\tcontrols": "\\u001f"}',
    '{"": ""}', '{"a\\"b": "c\\\\d"}',
    '{"a": 1, "b": 2, "a": 3}',
    '  {  "spaced" :  [ 1 ,  2 ]  }  ',
    # OpenAI tool definitions, calls and arguments
    json.dumps(WEATHER), json.dumps([WEATHER, SEARCH]),
    json.dumps(WEATHER, indent=2), json.dumps(SEARCH, separators=(",", ":"), ensure_ascii=False),
    '{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}',
    '[{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]',
    '{"temperature": 21.5, "humidity": 0.63, "wind": {"speed": 12, "gust": 30.0}, "alerts": []}',
]


def main():
    cases = []
    seen = set()
    for text in CASES:
        if text in seen:
            raise SystemExit(f"duplicate case {text!r}")
        seen.add(text)
        cases.append({"in": text, "out": json.dumps(json.loads(text), ensure_ascii=False)})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    # ASCII on disk (\u escapes): the fixture itself has no raw controls, U+2028 or BOM to trip an editor
    with open(OUT, "w", encoding="ascii") as f:
        json.dump(cases, f, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
