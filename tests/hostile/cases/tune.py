# tests/hostile/cases/tune.py — radiance --tune FILE (docs/TUNE.md): a missing, empty, truncated
# or hand-edited table is refused at start-up with one line naming the file and the line (exit 1);
# a table keyed for another container is refused naming it, or with --tune-ignore-mismatch
# ignored with one warning line; the server refuses it the same way.
import json
import os
import subprocess

HEAD = ("radiance-tune 1\ncontainer %s\nlibrary ref 0.1.0\ncpu_model x\ncpu_flags -\n"
        "options max_tok=512 max_seqs=1 ctx=2048 max_tolerance=0.001 deterministic=0 threads=2 kv_dtype=f32\n")
OP = "op index=3 name=gemm_nt3 params=0123456789abcdef rows=1..1 lib=ref variant=exact knobs=- ns=5\n"
GOOD = HEAD % "0000000000000000" + OP + "end 1\n"


def writer(text):
    def setup(t):
        with open(os.path.join(t, "m.tune"), "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
    return setup


def radiance(*extra):
    return ["{B}/radiance", "--model", "{MODEL}", "--tune", "{T}/m.tune", "--debug-graph"] + list(extra)


EDITS = [  # (name, table text, the message after "m.tune:")
    ("empty", "", r"m\.tune: empty"),
    ("not-a-table", "GGUF\n", r"m\.tune:1: not a tuning table"),
    ("version-2", GOOD.replace("radiance-tune 1", "radiance-tune 2"), r"m\.tune:1: tuning table version 2 is not supported"),
    ("truncated-no-end", GOOD.replace("end 1\n", ""), r"m\.tune:7: truncated"),
    ("truncated-mid-line", GOOD[:len(HEAD % ("0" * 16)) + 30], r"m\.tune:\d+: "),
    ("end-count", GOOD.replace("end 1", "end 2"), r"m\.tune:8: 'end 2' but the table has 1 op lines"),
    ("unknown-key", GOOD.replace("cpu_flags", "cpu_feature"), r"m\.tune:5: unknown key 'cpu_feature'"),
    ("unknown-op-key", GOOD.replace("ns=5", "time=5"), r"m\.tune:7: unknown key 'time' in an op line"),
    ("bad-number", GOOD.replace("index=3", "index=3e2"), r"m\.tune:7: index 3e2"),
    ("bad-option", GOOD.replace("threads=2", "threads=nan"), r"m\.tune:6: threads nan"),
    ("duplicate-entry", GOOD.replace(OP, OP + OP).replace("end 1", "end 2"), r"m\.tune:8: op 3 rows 1\.\.1 overlap line 7's"),
    ("duplicate-header", GOOD.replace("cpu_model x\n", "cpu_model x\ncpu_model y\n"), r"m\.tune:5: 'cpu_model' is given twice"),
    ("control-byte", GOOD.replace("cpu_model x", "cpu_model x\x1b[2J"), r"m\.tune:4: control byte 0x1b"),
    ("nul-byte", GOOD.replace("cpu_model x", "cpu_model x\0"), r"m\.tune:4: control byte 0x00"),
    ("crlf", GOOD.replace("\n", "\r\n"), r"m\.tune:1: "),
    ("long-line", GOOD.replace("cpu_model x", "cpu_model " + "x" * 5000), r"m\.tune:4: line longer than 4096 bytes"),
    ("knob-no-value", GOOD.replace("knobs=-", "knobs=threads"), r"m\.tune:7: knob 'threads' is not NAME:VALUE"),
    ("after-end", GOOD + "op index=4\n", r"m\.tune:9: a line after 'end'"),
]

CASES = [dict(name="tune-" + n, setup=writer(text), argv=radiance(), rc=1, stderr=r"^radiance: .*" + msg)
         for n, text, msg in EDITS]
CASES.append(dict(name="tune-missing-file", argv=radiance(), rc=1, stderr=r"^radiance: .*m\.tune: cannot open"))


def model_id():
    out = subprocess.run([os.environ["RAD_B"] + "/rad-info", "--json", os.environ["RAD_MODEL"]], capture_output=True, check=True)
    return json.loads(out.stdout)["id"]


def other_library(t):  # this container's id, another libref version
    writer((HEAD % model_id()).replace("ref 0.1.0", "ref 9.9") + "end 0\n")(t)


CASES += [
    dict(name="tune-other-container-refused", setup=writer(GOOD), argv=radiance(), rc=1,
         stderr=r"^radiance: --tune .*m\.tune: it was tuned for container 0000000000000000, this model is [0-9a-f]{{16}}"),
    dict(name="tune-other-container-ignored", setup=writer(GOOD), argv=radiance("--tune-ignore-mismatch"), rc=0, one_line=True,
         stderr=r"^radiance: warning: --tune .*m\.tune ignored: it was tuned for container 0000000000000000"),
    dict(name="tune-other-library-version-refused", setup=other_library, argv=radiance(), rc=1,
         stderr=r"^radiance: --tune .*: it was tuned with kernel libraries ref 9\.9, this run has ref 0\.1\.0"),
]
