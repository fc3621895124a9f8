#!/usr/bin/env python3
"""tests/hostile/run.py — the hostile-input suite: files, archives, flags, plugins and HTTP
clients thrown at the real tools, each under a time limit.

    python3 tests/hostile/run.py BUILD [--quick] [--only SUBSTR] [--list]

Cases live in tests/hostile/cases/*.py (stdlib Python, one file per area): CASES run one tool
binary each, SERVER_CASES start a server and play a client against it. A case fails on
  - a hang (its time limit passes: the process group is killed),
  - a death by a signal it did not expect (SIGSEGV, SIGBUS, SIGABRT, ...),
  - a sanitizer report (ASan, UBSan, LSan) in its stderr,
  - an exit status other than the one it expects,
  - a refusal that is not one line (rc != 0 and stderr not exactly one line), or a stderr that does
    not match the case's pattern (which names the file, key, flag, field or plugin),
  - a file left behind that must not exist (no_files), or its own check's complaint.
Needs BUILD's tools and plugins and the default model (make model); converts it once into
BUILD/hostile/smollm2.rad. Exit 0 when every case passed; the last line is the summary.
"""
import concurrent.futures
import glob
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAN_RE = re.compile(rb"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer")
SIGNAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def load_cases():
    cases, server_cases = [], []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/hostile/cases/*.py"))):
        area = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location("hostile_" + area, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for c in getattr(mod, "CASES", []):
            cases.append(dict(c, area=area))
        for c in getattr(mod, "SERVER_CASES", []):
            server_cases.append(dict(c, area=area))
    names = [c["name"] for c in cases + server_cases]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        sys.exit("hostile: case names used twice: " + ", ".join(dup))
    return cases, server_cases


def fmt(s, v):
    return s.format(**v) if isinstance(s, str) else s


def status_text(rc):
    if rc is None:
        return "running"
    if rc < 0:
        return "killed by " + SIGNAMES.get(-rc, "signal %d" % -rc)
    return "exit %d" % rc


def judge(case, v, rc, err):
    """The common verdict on a finished tool: None when it passed, else why not."""
    if SAN_RE.search(err):
        return "sanitizer report: " + err[SAN_RE.search(err).start():][:300].decode(errors="replace")
    want = case.get("rc", 1)
    if rc != want:
        return "%s, expected %s; stderr: %s" % (status_text(rc), status_text(want), err[-400:].decode(errors="replace"))
    text = err.decode(errors="replace")
    if case.get("one_line", rc != 0):
        lines = [l for l in text.splitlines() if l.strip()]
        if len(lines) != 1:
            return "expected one line on stderr, got %d: %r" % (len(lines), text[-400:])
    pat = case.get("stderr")
    if pat and not re.search(fmt(pat, v), text):
        return "stderr %r does not match %r" % (text[-400:], pat)
    for g in case.get("no_files", []):
        left = glob.glob(fmt(g, v))
        if left:
            return "left behind: " + ", ".join(left)
    return None


class Proc:
    """What a case's check sees of a finished run."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli(case, base):
    t = tempfile.mkdtemp(prefix="rad-hostile-")
    v = dict(base, T=t)
    try:
        if case.get("setup"):
            case["setup"](t)
        if case.get("argv") is None:  # the check runs the case itself
            why = case["check"](t, None)
            return why
        argv = [fmt(a, v) for a in case["argv"]]
        env = dict(os.environ, **{k: fmt(x, v) for k, x in case.get("env", {}).items()})
        out = open(fmt(case["stdout"], v), "wb") if case.get("stdout") else subprocess.PIPE
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.PIPE, env=env,
                             cwd=t, start_new_session=True)
        limit = case.get("timeout", 20) * base["SLOW"]
        try:
            so, se = p.communicate(case.get("stdin") or b"", timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return "hang: no exit within %g s" % limit
        finally:
            if out is not subprocess.PIPE:
                out.close()
        so = so or b""
        why = judge(case, v, p.returncode, se)
        if why is None and case.get("check"):
            why = case["check"](t, Proc(p.returncode, so, se))
        return why
    except Exception as ex:  # a case's own setup or check broke: report it as a failure
        return "case error: %r" % (ex,)
    finally:
        shutil.rmtree(t, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def health(port):
    try:
        return urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2).status == 200
    except Exception:
        return False


def run_server(case, base):
    t = tempfile.mkdtemp(prefix="rad-hostile-")
    v = dict(base, T=t)
    p = None
    log = os.path.join(t, "server.log")
    try:
        if case.get("setup"):
            case["setup"](t)
        port = free_port()
        argv = [base["B"] + "/radiance", "--model", fmt(case.get("model", "{MODEL}"), v), "--host", "127.0.0.1",
                "--port", str(port), "--ctx", "512", "--threads", "2", "--drain-timeout", "5"]
        argv += [fmt(a, v) for a in case.get("args", [])]
        lf = open(log, "wb")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, cwd=t, start_new_session=True)
        deadline = time.time() + 120 * base["SLOW"]
        while not health(port):
            if p.poll() is not None:
                return "server exited before ready (%s): %s" % (status_text(p.returncode), tail(log))
            if time.time() > deadline:
                return "server not ready in time: " + tail(log)
            time.sleep(0.1)
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            run = case["run"]
            nargs = run.__code__.co_argcount if hasattr(run, "__code__") else 3
            fut = ex.submit(run, *(port, t, p)[:nargs])
            limit = case.get("timeout", 60) * base["SLOW"]
            try:
                why = fut.result(timeout=limit)
            except concurrent.futures.TimeoutError:
                why = "hang: the client side did not finish within %g s" % limit
            except Exception as exc:
                why = "client error: %r" % (exc,)
        if why:
            return why
        want = case.get("exit", 0)
        if want is not None:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30 * base["SLOW"])
            except subprocess.TimeoutExpired:
                return "server did not exit within 30 s of SIGTERM: " + tail(log)
            if p.returncode != want:
                return "server %s, expected %s: %s" % (status_text(p.returncode), status_text(want), tail(log))
        with open(log, "rb") as f:
            err = f.read()
        if SAN_RE.search(err):
            return "sanitizer report: " + err[SAN_RE.search(err).start():][:300].decode(errors="replace")
        return None
    except Exception as ex:
        return "case error: %r" % (ex,)
    finally:
        if p and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(t, ignore_errors=True)


def tail(path, n=600):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    b = os.path.abspath(args[0])
    quick = "--quick" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    cases, server_cases = load_cases()
    if "--list" in args:
        for c in cases + server_cases:
            print("%-10s %-45s %s" % (c["area"], c["name"], "quick" if c.get("quick", True) else "full"))
        return 0
    pick = lambda cs: [c for c in cs if (not quick or c.get("quick", True)) and (not only or only in c["name"])]
    cases, server_cases = pick(cases), pick(server_cases)

    gguf = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(gguf):
        sys.exit("hostile: %s missing (make model)" % gguf)
    os.makedirs(b + "/hostile", exist_ok=True)
    model = b + "/hostile/smollm2.rad"
    if not os.path.exists(model) or os.path.getmtime(model) < os.path.getmtime(gguf):
        r = subprocess.run([b + "/rad-convert", gguf, "-o", model, "--force"], capture_output=True)
        if r.returncode:
            sys.exit("hostile: rad-convert %s failed: %s" % (gguf, r.stderr.decode(errors="replace")))
        os.chmod(model, 0o444)  # cases copy it before changing it
    # the embedding model (make model fetches its folder), for the cases that name {EMBED_MODEL}
    folder = os.path.join(ROOT, "models/all-MiniLM-L6-v2")
    embed = b + "/hostile/minilm.rad"
    if os.path.exists(os.path.join(folder, "config.json")) and not os.path.exists(embed):
        r = subprocess.run([b + "/rad-convert", folder, "-o", embed, "--force"], capture_output=True)
        if r.returncode:
            sys.exit("hostile: rad-convert %s failed: %s" % (folder, r.stderr.decode(errors="replace")))
        os.chmod(embed, 0o444)
    if not os.path.exists(embed):
        skipped = [c["name"] for c in server_cases if "EMBED_MODEL" in c.get("model", "")]
        server_cases = [c for c in server_cases if "EMBED_MODEL" not in c.get("model", "")]
        if skipped:
            print("hostile: %s not fetched (make model): skipped %s" % (folder, ", ".join(skipped)))
    # a sanitizer build is slower: its limits stretch, the verdicts do not
    slow = 4 if os.path.basename(b) != "build" else 1
    base = dict(B=b, MODEL=model, GGUF=gguf, ROOT=ROOT, PLUGINS=b + "/plugins", SLOW=slow, EMBED_MODEL=embed)
    os.environ.update(RAD_B=b, RAD_MODEL=model, RAD_GGUF=gguf, RAD_ROOT=ROOT)
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1")

    failed, t0 = [], time.time()
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        for c, why in zip(cases, ex.map(lambda c: run_cli(c, base), cases)):
            print("%s %-10s %s%s" % ("ok  " if not why else "FAIL", c["area"], c["name"], "" if not why else ": " + why),
                  flush=True)
            if why:
                failed.append(c["name"])
    for c in server_cases:
        why = run_server(c, base)
        print("%s %-10s %s%s" % ("ok  " if not why else "FAIL", c["area"], c["name"], "" if not why else ": " + why),
              flush=True)
        if why:
            failed.append(c["name"])
    areas = {}
    for c in cases + server_cases:
        areas[c["area"]] = areas.get(c["area"], 0) + 1
    n = len(cases) + len(server_cases)
    print("hostile: %d cases (%s), %d refused cleanly or served correctly, %d failed%s in %.0f s" %
          (n, ", ".join("%s %d" % kv for kv in sorted(areas.items())), n - len(failed), len(failed),
           " (" + ", ".join(failed) + ")" if failed else "", time.time() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
