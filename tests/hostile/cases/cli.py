# tests/hostile/cases/cli.py — the tools' command lines: every numeric flag of every tool with
# values that are not finite decimals in range (exit 2, the flag named), --set typed by its key
# and given once, stdout to a full disk or a closed pipe (exit 1, "stdout: ..."), and rad-convert
# killed mid-write (no temporary left, death by that signal).
import glob
import os
import resource
import signal
import subprocess
import time

BAD = ["nan", "-nan", "NaN", "inf", "-inf", "1e309", "0x10", "", "1 ", " 1", "abc"]

# (flag, whole, negative values in range): radiance's numeric flags (tools/radiance/main.c)
RADIANCE = [("-n", 1, 0), ("--temp", 0, 0), ("--top-k", 1, 0), ("--top-p", 0, 0), ("--min-p", 0, 0),
            ("--repeat-penalty", 0, 0), ("--presence-penalty", 0, 1), ("--frequency-penalty", 0, 1),
            ("--threads", 1, 0), ("--ctx", 1, 0), ("--batch", 1, 0), ("--port", 1, 0), ("--max-body", 1, 0),
            ("--max-header", 1, 0), ("--max-conns", 1, 0), ("--idle-timeout", 1, 0), ("--max-seqs", 1, 0),
            ("--kv-blocks", 1, 0), ("--max-mixed-tok", 1, 0), ("--max-queue", 1, 0), ("--drain-timeout", 1, 0),
            ("--header-timeout", 0, 0), ("--body-timeout", 0, 0), ("--seed", 1, 0), ("--spec-depth", 1, 0)]


def slug(v):
    names = {"": "empty", "NaN": "nan-mixed-case", "1 ": "trailing-space", " 1": "leading-space", "-nan": "minus-nan", "-inf": "minus-inf",
             "-1": "minus-1", "1.5": "fraction", "1e30": "huge"}
    return names.get(v, v.lower().replace(".", "p").replace("+", "plus"))


QUICK = {"nan", "inf", "", "1.5"}  # make test's quick mode: these per flag; the rest in the full run


def values(whole, neg_ok):
    return BAD + ["1e30"] + (["1.5"] if whole else []) + ([] if neg_ok else ["-1"])


CASES = []

# --tokenize makes it a one-shot job: a value let through ends at once (exit 0 or 1), not as a server
for flag, whole, neg in RADIANCE:
    for v in values(whole, neg):
        CASES.append(dict(name="radiance-%s-%s" % (flag.lstrip("-"), slug(v)),
                          argv=["{B}/radiance", "--model", "{MODEL}", "--tokenize", flag, v], stdin=b"hi",
                          rc=2, stderr=r"^radiance: %s .*: expected a (whole )?number in \[" % flag, quick=v in QUICK))

for v in ["18446744073709551616", "99999999999999999999999", "+1", "1e3"]:
    CASES.append(dict(name="radiance-seed-" + slug(v), argv=["{B}/radiance", "--model", "{MODEL}", "--tokenize", "--seed", v],
                      stdin=b"hi", rc=2, stderr=r"^radiance: --seed .*: expected a whole number in \[0, 18446744073709551615\]"))
CASES.append(dict(name="radiance-seed-max", argv=["{B}/radiance", "--model", "{MODEL}", "--tokenize", "--seed",
                                                   "18446744073709551615"], stdin=b"hi", rc=0))

for i, v in enumerate(["1,abc", "0x10", "1.5", "-1", "+1", "2147483648", "99999999999999999999", ",", "", "1;2", "nan"]):
    CASES.append(dict(name="radiance-ids-%d" % i, argv=["{B}/radiance", "--model", "{MODEL}", "--ids", v, "-n", "1"],
                      rc=2, stderr=r"^radiance: --ids"))

# speculative decoding's flags: a depth past 16 or without a drafter, an unknown --spec, two drafters
# (exit 2, the flag named); a draft model that is not the target's tokenizer's, or no file (exit 1)
for name, args, rc, err in [("spec-depth-17", ["--spec", "ngram", "--spec-depth", "17"], 2, r"^radiance: --spec-depth 17"),
                            ("spec-depth-alone", ["--spec-depth", "3"], 2, r"^radiance: --spec-depth needs a drafter"),
                            ("spec-unknown", ["--spec", "eagle"], 2, r"^radiance: --spec 'eagle': expected ngram"),
                            ("spec-two-drafters", ["--spec", "ngram", "--draft", "{MODEL}"], 2, r"^radiance: --draft and --spec ngram"),
                            ("spec-draft-missing", ["--draft", "{T}/none.rad"], 1, r"^radiance: --draft: .*none\.rad"),
                            ("spec-draft-a-gguf", ["--draft", "{ROOT}/tests/fixtures/cvec/good.gguf"], 1, r"^radiance: --draft: ")]:
    CASES.append(dict(name="radiance-" + name, argv=["{B}/radiance", "--model", "{MODEL}", "-p", "x", "-n", "2"] + args, rc=rc,
                      stderr=err))

# rad-convert: --zstd a level 1..19, --align a power of two in [8, 1 MiB], and radiance's step
# bounds that --plan-only declares against
for flag, extra in [("--zstd", ["1.5", "-1", "0", "20"]), ("--align", ["1.5", "-1", "0", "4", "96", "2097152"]),
                    ("--max-seqs", ["1.5", "-1", "0", "4097"]), ("--max-mixed-tok", ["1.5", "-1", "0"]),
                    ("--ctx", ["1.5", "-1", "15"])]:
    for v in BAD + extra:
        CASES.append(dict(name="rad-convert-%s-%s" % (flag.lstrip("-"), slug(v)),
                          argv=["{B}/rad-convert", "{GGUF}", "-o", "{T}/o.rad", flag, v], rc=2,
                          stderr=r"^rad-convert: %s " % flag, no_files=["{T}/o.rad*"], quick=v in QUICK))

# rad-kbench and rad-tune: radiance's step bounds and --threads (tools/rad-kbench/main.c,
# tools/rad-tune/main.c), refused before the engine opens
for flag, extra in [("--max-mixed-tok", ["1.5", "-1", "0"]), ("--max-seqs", ["1.5", "-1", "0", "4097"]),
                    ("--ctx", ["1.5", "-1", "15"]), ("--threads", ["1.5", "-1", "0", "1025"])]:
    for v in BAD + extra:
        for tool in ("rad-kbench", "rad-tune"):  # rad-tune takes the same flags (tools/rad-tune/main.c)
            CASES.append(dict(name="%s-%s-%s" % (tool, flag.lstrip("-"), slug(v)),
                              argv=["{B}/" + tool, "-m", "{MODEL}", "--kernels", "ref", flag, v] +
                              (["-o", "{T}/t.tune"] if tool == "rad-tune" else []), rc=2,
                              stderr=r"^%s: %s .*: expected a whole number in \[" % (tool, flag), quick=v in QUICK,
                              no_files=["{T}/t.tune*"]))

# the tolerance bound (every tool that selects kernels) and --tp: a number in range, and --fast with
# another bound refused rather than one of them silently winning
TOLS = [("radiance", ["-p", "x", "-n", "1"], "--max-tolerance"), ("rad-kbench", [], "--max-tolerance"),
        ("rad-tune", ["-o", "{T}/t.tune"], "--tolerance")]
for tool, extra, flag in TOLS:
    for v in ["nan", "inf", "-1", "0", "2", "1e309", "", "x"]:
        CASES.append(dict(name="%s-%s-%s" % (tool, flag.lstrip("-"), slug(v)),
                          argv=["{B}/" + tool, "-m" if tool != "radiance" else "--model", "{MODEL}", flag, v] + extra, rc=2,
                          stderr=r"^%s: %s " % (tool, flag), quick=v in ("nan", "0"), no_files=["{T}/t.tune*"]))
    CASES.append(dict(name="%s-fast-and-another-tolerance" % tool,
                      argv=["{B}/" + tool, "-m" if tool != "radiance" else "--model", "{MODEL}", "--fast", flag, "1e-3"] + extra,
                      rc=2, stderr=r"^%s: --fast is --(max-)?tolerance 0\.02: give one of them" % tool, no_files=["{T}/t.tune*"]))
for tool, extra in [("radiance", ["-p", "x", "-n", "1"]), ("rad-kbench", []), ("rad-tune", ["-o", "{T}/t.tune"])]:
    m = ["--model" if tool == "radiance" else "-m", "{MODEL}"]
    for v in ["65", "0", "1.5", "x", ""]:
        CASES.append(dict(name="%s-tp-%s" % (tool, slug(v) if v else "empty"), argv=["{B}/" + tool] + m + ["--tp", v] + extra,
                          rc=2, stderr=r"^%s: --tp " % tool, quick=v == "0", no_files=["{T}/t.tune*"]))
    # a split that leaves a rank no query head of its KV head (SmolLM2: 9 heads, 3 KV heads): one line
    # naming the plugin, the dimension and N, nothing written
    CASES.append(dict(name="%s-tp-impossible-split" % tool, argv=["{B}/" + tool] + m + ["--tp", "32"] + extra, rc=1,
                      stderr=r"^%s: .*llama_ggml: model\.n_head .*--tp 32" % tool, no_files=["{T}/t.tune*"]))
# --tp 2 serves: two ranks, one line of text
CASES.append(dict(name="radiance-tp-2-served", argv=["{B}/radiance", "--model", "{MODEL}", "--tp", "2", "-p", "x", "-n", "2"], rc=0))
for v in ["", ",", "1,", "0", "1,x", "1.5", ",".join(["1"] * 17)]:
    CASES.append(dict(name="rad-kbench-buckets-%s" % slug(v), argv=["{B}/rad-kbench", "-m", "{MODEL}", "--buckets", v], rc=2,
                      stderr=r"^rad-kbench: --buckets", quick=v == "1,x"))

# the deployment switches (docs/PLUGINS.md, "Probe bits"): a bad value is a usage error naming the flag
# and the value in every tool; a good one the llama_ggml plugin does not grant is refused naming both
DEPLOY_BAD = [("--kv-cache-dtype", ["fp9", "FP8_V4", "", "fp8"]), ("--tp-attn-split", ["heads", "", "rows "]),
              ("--state-cache-dtype", ["bf16", "", "F16"]), ("--kv-resident", ["0", "-1", "1.5", "nan", "16777217", ""]),
              ("--control-vector", [""]), ("--tp-wire", ["fast", "", "Lossy"]), ("--tp-wire-min-bytes", ["0", "-1", "x", ""])]
DEPLOY_GOOD = [("--kv-cache-dtype", "fp8_v4", 1), ("--kv-cache-dtype", "fp8_k6v4", 1), ("--tp-attn-split", "rows", 1),
               ("--state-cache-dtype", "f16", 1), ("--kv-resident", "4", 0)]  # 1: the refusal names the value too
# --control-vector llama_ggml serves (arch/common/rad_cvec.h): radiance runs with it
CASES.append(dict(name="radiance-control-vector-served", argv=["{B}/radiance", "--model", "{MODEL}", "--control-vector",
                                                               "{ROOT}/tests/fixtures/cvec/good.gguf", "-p", "x", "-n", "1"], rc=0))
for tool, extra in [("radiance", ["-p", "x", "-n", "1"]), ("rad-kbench", ["--quick"]), ("rad-tune", ["-o", "{T}/t.tune", "--quick"])]:
    m = ["--model" if tool == "radiance" else "-m", "{MODEL}"]
    for flag, vals in DEPLOY_BAD:
        for v in vals:
            CASES.append(dict(name="%s-%s-%s" % (tool, flag.lstrip("-"), slug(v) if v else "empty"), argv=["{B}/" + tool] + m + [flag, v] + extra,
                              rc=2, stderr=r"^%s: %s" % (tool, flag), quick=v in ("fp9", "heads", "0"), no_files=["{T}/t.tune*"]))
    for flag, v, with_value in DEPLOY_GOOD:
        named = flag + (" " + v if with_value else "")
        CASES.append(dict(name="%s-%s-%s-refused" % (tool, flag.lstrip("-"), slug(os.path.basename(v))),
                          argv=["{B}/" + tool] + m + [flag, v] + extra, rc=1,
                          stderr=r"^%s: %s: plugin 'llama_ggml' does not serve it" % (tool, named), no_files=["{T}/t.tune*"]))

# --set: a key once; a value in the type of its key (model.rope_theta is f32, model.n_layers u32)
SET = [("twice", ["--set", "model.name=a", "--set", "model.name=b"], r"--set model\.name: given twice"),
       ("empty-key", ["--set", "=x"], r"--set =x: expected KEY=VALUE"),
       ("no-value", ["--set", "model.name"], r"expected KEY=VALUE"),
       ("long-key", ["--set", "k" * 300 + "=1"], r"longer than 255 bytes"),
       ("control-key", ["--set", "a\x01b=1"], r"control character"),
       ("too-many", sum((["--set", "k%d=v" % i] for i in range(65)), []), r"--set k64: more than 64")]
for v in ["nan", "-nan", "inf", "-inf", "1e309", "0x10", "", "fast", "1 "]:
    SET.append(("rope-theta-" + slug(v), ["--set", "model.rope_theta=" + v], r"--set model\.rope_theta "))
for v in ["1.5", "-1", "4294967296", "nan", "1e3", "0x1e"]:
    SET.append(("n-layers-" + slug(v), ["--set", "model.n_layers=" + v], r"--set model\.n_layers "))
SET.append(("tie-embeddings-yes", ["--set", "model.tie_embeddings=yes"], r"--set model\.tie_embeddings: 'yes' is not true or false"))
for name, args, pat in SET:
    CASES.append(dict(name="rad-convert-set-" + name, argv=["{B}/rad-convert", "{GGUF}", "-o", "{T}/o.rad"] + args,
                      rc=2, stderr=pat, no_files=["{T}/o.rad*"]))
    CASES.append(dict(name="rad-convert-vocab-set-" + name,
                      argv=["{B}/rad-convert", "{GGUF}", "--vocab-only", "-o", "{T}/o.rad"] + args,
                      rc=2, stderr=pat, no_files=["{T}/o.rad*"], quick=False))

# stdout to a full disk: exit 1, one line naming stdout
FULL = [("rad-info-json", ["{B}/rad-info", "--json", "--tensors", "{MODEL}"], None),
        ("rad-info-text", ["{B}/rad-info", "{GGUF}"], None),
        ("rad-info-check", ["{B}/rad-info", "--check", "{MODEL}"], None),
        ("rad-info-plugins", ["{B}/rad-info", "--plugins", "--json"], None),
        ("rad-info-help", ["{B}/rad-info", "--help"], None),
        ("rad-convert-stdout", ["{B}/rad-convert", "{GGUF}", "-o", "-"], None),
        ("rad-convert-plan", ["{B}/rad-convert", "{GGUF}", "--plan-only", "-v"], None),
        ("rad-convert-help", ["{B}/rad-convert", "--help"], None),
        ("radiance-help", ["{B}/radiance", "--help"], None),
        ("radiance-p", ["{B}/radiance", "--model", "{MODEL}", "-p", "Once upon a time", "-n", "16", "--temp", "0"], None),
        ("radiance-print-ids", ["{B}/radiance", "--model", "{MODEL}", "--ids", "1,2,3", "-n", "16", "--print-ids"], None),
        ("radiance-debug-graph", ["{B}/radiance", "--model", "{MODEL}", "--debug-graph"], None),
        ("radiance-tokenize", ["{B}/radiance", "--model", "{MODEL}", "--tokenize"], b"Hello world"),
        ("radiance-detokenize", ["{B}/radiance", "--model", "{MODEL}", "--detokenize"], b"19556 905")]
for name, argv, stdin in FULL:
    CASES.append(dict(name="dev-full-" + name, argv=argv, stdin=stdin, stdout="/dev/full", rc=1,
                      stderr=r"^(radiance|rad-info|rad-convert): stdout: .*No space left on device"))


def closed_pipe(argv, want):
    """Runs argv with stdout a pipe whose reader reads one byte and goes: exit 1, one line, promptly."""
    def check(t, proc):
        env = os.environ
        argv2 = [a.format(B=env["RAD_B"], MODEL=env["RAD_MODEL"], GGUF=env["RAD_GGUF"], T=t) for a in argv]
        p = subprocess.Popen(argv2, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=t, preexec_fn=lambda: signal.signal(signal.SIGPIPE, signal.SIG_DFL))
        p.stdout.read(1)
        p.stdout.close()
        p.stdout = None  # communicate reads stderr alone, under its own limit
        try:
            _, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return "hang: still writing 120 s after its reader went"
        text = err.decode(errors="replace")
        if p.returncode != 1 or len(text.strip().splitlines()) != 1 or want not in text:
            return "status %d, stderr %r; expected exit 1 and one line with %r" % (p.returncode, text[-300:], want)
        return None
    return check


CASES += [
    dict(name="epipe-radiance-p", argv=None, check=closed_pipe(
        ["{B}/radiance", "--model", "{MODEL}", "-p", "Once upon a time", "-n", "100000", "--ctx", "8192"],
        "radiance: stdout: Broken pipe"), timeout=180),
    dict(name="epipe-radiance-print-ids", argv=None, check=closed_pipe(
        ["{B}/radiance", "--model", "{MODEL}", "--ids", "1,2,3", "-n", "100000", "--ctx", "8192", "--print-ids"],
        "radiance: stdout: Broken pipe"), timeout=180),
    dict(name="epipe-rad-convert-stdout", argv=None, check=closed_pipe(
        ["{B}/rad-convert", "{GGUF}", "-o", "-"], "rad-convert: stdout: write failed: Broken pipe"), timeout=180),
]


def killed_mid_write(sig):
    """rad-convert with --zstd 19 (a long write), killed once its temporary exists: death by sig, no file."""
    def check(t, proc):
        out = os.path.join(t, "o.rad")
        argv = [os.environ["RAD_B"] + "/rad-convert", os.environ["RAD_GGUF"], "-o", out, "--zstd", "19"]

        def child():
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
                signal.signal(s, signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGQUIT dumps no core here
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             cwd=t, preexec_fn=child)
        try:
            deadline = time.time() + 120
            while not glob.glob(out + ".tmp.*"):
                if p.poll() is not None:
                    return "rad-convert ended (status %d) before its temporary appeared" % p.returncode
                if time.time() > deadline:
                    return "no temporary within 120 s"
                time.sleep(0.01)
            p.send_signal(sig)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                return "still running 60 s after %s" % signal.Signals(sig).name
            if p.returncode != -sig:
                return "status %d, expected death by %s" % (p.returncode, signal.Signals(sig).name)
            left = glob.glob(out + "*")
            if left:
                return "left behind: " + ", ".join(left)
            return None
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return check


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    CASES.append(dict(name="rad-convert-killed-by-" + signal.Signals(s).name.lower(), argv=None,
                      check=killed_mid_write(s), timeout=240, quick=s == signal.SIGTERM))


# ---- a source truncated while rad-convert reads it ----------------------------------------------
# The SIGBUS from reading past the new end is caught: one line naming the file, the temporary
# removed, exit 3 (RAD_EXIT_MODEL_CHANGED), never a death by SIGBUS with OUT.tmp.* left behind.
def _convert_truncated(t, _proc):
    import glob as _glob, shutil as _shutil, subprocess as _sp, time as _time
    src = os.path.join(t, "src.gguf")
    _shutil.copyfile(os.environ["RAD_GGUF"], src)
    out = os.path.join(t, "out.rad")
    p = _sp.Popen([os.environ["RAD_B"] + "/rad-convert", src, "--quant", "f32", "-o", out],
                  stdout=_sp.DEVNULL, stderr=_sp.PIPE)
    deadline = _time.time() + 60
    while _time.time() < deadline and p.poll() is None:
        tmps = _glob.glob(out + ".tmp.*")
        if tmps and os.path.getsize(tmps[0]) > (8 << 20):
            break
        _time.sleep(0.005)
    if p.poll() is not None:
        return "rad-convert finished before the source could be cut (%d)" % p.returncode
    os.truncate(src, 1 << 20)
    try:
        err = p.communicate(timeout=60)[1].decode(errors="replace")
    except _sp.TimeoutExpired:
        p.kill()
        return "hang after the truncation"
    left = _glob.glob(out + "*")
    if p.returncode == 0:
        return None if not _glob.glob(out + ".tmp.*") else "left: %r" % left  # it had read everything already
    if p.returncode != 3 or "src.gguf: truncated while converting" not in err or len(err.strip().splitlines()) != 1:
        return "status %d, stderr %r" % (p.returncode, err[-300:])
    return "left behind: %r" % left if left else None


CASES.append(dict(name="cli-rad-convert-source-truncated", argv=None, check=_convert_truncated, timeout=120))

# generation.* keys given with --set are typed (a GGUF has none to take the type from)
CASES += [
    dict(name="cli-set-generation-%s" % slug, argv=["{B}/rad-convert", "{GGUF}", "--plan-only", "--set", arg], rc=2,
         stderr=pat)
    for slug, arg, pat in (("temperature-nan", "generation.temperature=nan", r"--set generation\.temperature nan"),
                           ("top-k-fraction", "generation.top_k=1.5", r"--set generation\.top_k 1\.5: expected a whole number"),
                           ("do-sample-yes", "generation.do_sample=yes", r"--set generation\.do_sample: 'yes' is not true or false"))
]
