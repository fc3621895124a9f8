# tests/hostile/cases/plugins.py — bad plugins on the plugin path beside the real ones, and the
# lists users give (--kernels, --plugin-dir, $RADIANCE_PLUGIN_PATH). A bad file is skipped with one
# warning line and every tool goes on with the rest (exit 0); it is an error (exit 1, the plugin
# named) when it is the one needed (--kernels names it, or the model's architecture is served only
# by it) or under RADIANCE_PLUGINS_STRICT=1. Test plugins: tests/plugins/kern_bad.c (wrong in the
# way $RAD_TEST_BADLIB names), arch_bad.c ($RAD_TEST_BADARCH), kern_bad_noexport.c.
import os
import shutil


def _b():
    return os.environ["RAD_B"]


def _dir(t):
    d = os.path.join(t, "p")
    os.makedirs(d, exist_ok=True)
    return d


def _copy(so, as_name=None):
    def setup(t):
        shutil.copy(os.path.join(_b(), "test-plugins", so), os.path.join(_dir(t), as_name or so))
    return setup


def _text(name, data=b"this is not a shared object\n"):
    def setup(t):
        with open(os.path.join(_dir(t), name), "wb") as f:
            f.write(data)
    return setup


def _fifo(name):
    return lambda t: os.mkfifo(os.path.join(_dir(t), name))


def _mkdir(name):
    return lambda t: os.mkdir(os.path.join(_dir(t), name))


# (slug, file name in {T}/p, setup, environment, why: a regex of the reason)
BAD = [
    ("null-table", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "null-table"},
     r"kernel library 'kern_bad': RadKernelLib\.kernels is NULL with n_kernels 3"),
    ("huge-count", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "huge-count"},
     r"RadKernelLib\.n_kernels 4294967295 is over the limit"),
    ("wild-table", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "wild-table"},
     r"RadKernelLib\.kernels points at unmapped memory"),
    ("wild-op", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "op-wild"},
     r"kernel 1: RadKernel\.op points at unmapped memory"),
    ("lib-struct-size", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "lib-size-small"},
     r"RadKernelLib\.struct_size 8 is smaller"),
    ("kernel-struct-size", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "kernel-size"},
     r"kernel 0: RadKernel\.struct_size 4"),
    ("nan-tolerance", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "tol-nan"},
     r"RadKernel\.tolerance nan"),
    ("run-null", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "run-null"}, r"RadKernel\.run is NULL"),
    ("dup-kernels", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "dup"},
     r"kernels 1 and 2 are both add:v1"),
    ("abi-major", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "info-abi"}, r"built for ABI 2\.[0-9]+"),
    ("info-null", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "info-null"},
     r"rad_plugin_info\(\) returned NULL"),
    ("name-null", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "info-name-null"},
     r"RadPluginInfo\.name is NULL"),
    ("desc-control", "kern_bad.so", _copy("kern_bad.so"), {"RAD_TEST_BADLIB": "info-desc"},
     r"RadPluginInfo\.description has a control"),
    ("arch-id-null", "arch_bad.so", _copy("arch_bad.so"), {"RAD_TEST_BADARCH": "null-id"},
     r"architecture plugin 'arch_bad': rad_arch_id\(\) is NULL"),
    ("arch-id-wild", "arch_bad.so", _copy("arch_bad.so"), {"RAD_TEST_BADARCH": "wild-id"},
     r"rad_arch_id\(\) points at unmapped memory"),
    ("no-exports", "kern_bad_noexport.so", _copy("kern_bad_noexport.so"), {}, r"exports no rad_plugin_info"),
    ("text-file", "x.so", _text("x.so"), {}, r"cannot load: .*x\.so"),
    ("empty-file", "x.so", _text("x.so", b""), {}, r"cannot load"),
    ("fifo", "x.so", _fifo("x.so"), {}, r"not a regular file \(a FIFO\)"),
    ("directory", "x.so", _mkdir("x.so"), {}, r"not a regular file \(a directory\)"),
]
QUICK = {"null-table", "wild-table", "text-file", "fifo", "arch-id-null"}


def _lists(names):
    """check: stdout of rad-info --plugins lists each of names once."""
    def check(t, proc):
        out = proc.stdout.decode(errors="replace")
        for n in names:
            k = sum(1 for l in out.splitlines() if l.split()[:1] == [n])
            if k != 1:
                return "rad-info --plugins lists '%s' %d times: %r" % (n, k, out[-400:])
        return None
    return check


def _no_warning(t, proc):
    return "a warning: %r" % proc.stderr[-300:] if b"warning" in proc.stderr else None


def _last_line(pat):
    import re

    def check(t, proc):
        lines = [l for l in proc.stderr.decode(errors="replace").splitlines() if l.strip()]
        bad = [l for l in lines[:-1] if ": warning: plugin " not in l]
        if not lines or not re.search(pat.replace("{T}", re.escape(t)), lines[-1]) or bad:
            return "want every line a warning and the last one %r: %r" % (pat, lines[-3:])
        return None
    return check


CASES = []
for slug, name, setup, env, why in BAD:
    warn = r"warning: plugin {T}/p/%s skipped: (.*: )?%s" % (name.replace(".", r"\."), why)
    q = slug in QUICK
    CASES += [
        dict(name="plugins-%s-rad-info" % slug, setup=setup, env=env, rc=0,
             argv=["{B}/rad-info", "--plugins", "--plugin-dir", "{T}/p"], stderr="^rad-info: " + warn,
             check=_lists(["ref", "llama", "llama_ggml"]), quick=True),
        dict(name="plugins-%s-rad-convert-plan" % slug, setup=setup, env=env, rc=0,
             argv=["{B}/rad-convert", "{GGUF}", "--plan-only", "--plugin-dir", "{T}/p"],
             stderr="^rad-convert: " + warn, quick=q),
        dict(name="plugins-%s-radiance" % slug, setup=setup, env=env, rc=0,
             argv=["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "{T}/p", "-p", "The capital of France is",
                   "-n", "2", "--temp", "0", "--threads", "2"],
             stderr="^radiance: " + warn, timeout=60, quick=q),
        dict(name="plugins-%s-strict" % slug, setup=setup, env=dict(env, RADIANCE_PLUGINS_STRICT="1"), rc=1,
             argv=["{B}/rad-info", "--plugins", "--plugin-dir", "{T}/p"],
             stderr=r"^rad-info: plugin {T}/p/%s: (.*: )?%s.*\(RADIANCE_PLUGINS_STRICT=1\)$" % (name.replace(".", r"\."), why),
             quick=q),
        dict(name="plugins-%s-radiance-strict" % slug, setup=setup, env=dict(env, RADIANCE_PLUGINS_STRICT="1"), rc=1,
             argv=["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "{T}/p", "-p", "hi", "-n", "1"],
             stderr=r"^radiance: plugin {T}/p/%s: " % name.replace(".", r"\."), timeout=60, quick=False),
    ]

# The bad one is the one needed: --kernels names it (a warning, then the error naming why).
CASES += [
    dict(name="plugins-kernels-names-the-skipped-one", setup=_copy("kern_bad.so"), env={"RAD_TEST_BADLIB": "null-table"},
         rc=1, one_line=False,
         argv=["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "{T}/p", "--kernels", "kern_bad", "-p", "hi", "-n", "1"],
         check=_last_line(r"^radiance: --kernels: kernel library 'kern_bad' \({T}/p/kern_bad\.so\) was skipped: "
                          r".*RadKernelLib\.kernels is NULL with n_kernels 3$"),
         timeout=60),
    dict(name="plugins-kernels-a-good-one-beside-a-bad-one", setup=_copy("kern_bad.so"), env={"RAD_TEST_BADLIB": "null-table"},
         rc=0, argv=["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "{T}/p", "--kernels", "ref", "-p", "hi", "-n", "1"],
         stderr=r"warning: plugin {T}/p/kern_bad\.so skipped", timeout=60),
]


# The model's architecture is served only by the bad one: a tool of its own whose plugins/
# folder holds kern_ref and a broken arch_llama_ggml.so.
def _lonely(t):
    b = _b()
    d = os.path.join(t, "bin", "plugins")
    os.makedirs(d)
    shutil.copy(os.path.join(b, "radiance"), os.path.join(t, "bin", "radiance"))
    shutil.copy(os.path.join(b, "plugins", "kern_ref.so"), d)
    shutil.copy(os.path.join(b, "plugins", "arch_llama.so"), d)
    with open(os.path.join(d, "arch_llama_ggml.so"), "wb") as f:
        f.write(b"truncated in transit\n")


CASES += [
    dict(name="plugins-needed-architecture-skipped", setup=_lonely, rc=1, one_line=False,
         argv=["{T}/bin/radiance", "--model", "{MODEL}", "-p", "hi", "-n", "1"],
         check=_last_line(r"^radiance: no plugin serves architecture 'llama' .*; skipped: {T}/bin/plugins/arch_llama_ggml\.so "
                          r"\(cannot load"),
         timeout=60),
]

# The --kernels list: every item once, none empty (the first of these wrote past a heap array).
for slug, arg, why in [("twice", "ref,ref", r"--kernels: 'ref' named twice"),
                       ("empty-item", "ref,,x", r"--kernels: an empty item in 'ref,,x'"),
                       ("comma", ",", r"--kernels: an empty item in ','"),
                       ("trailing-comma", "ref,", r"--kernels: an empty item in 'ref,'"),
                       ("empty", "", r"--kernels: an empty list"),
                       ("unknown", "nope", r"--kernels: no kernel library named 'nope' is installed")]:
    CASES.append(dict(name="plugins-kernels-%s" % slug, rc=1, stderr="^radiance: " + why + "$", timeout=60,
                      argv=["{B}/radiance", "--model", "{MODEL}", "--kernels", arg, "-p", "hi", "-n", "1"]))

# The plugin path: a folder named twice is searched once; empty entries are refused (a flag) or
# ignored ($RADIANCE_PLUGIN_PATH's "a::b" and a trailing ':').
CASES += [
    dict(name="plugins-plugin-dir-twice", rc=0,
         argv=["{B}/rad-info", "--plugins", "--plugin-dir", "{PLUGINS}", "--plugin-dir", "{PLUGINS}/", "--plugin-dir", "{PLUGINS}"],
         check=lambda t, p: _no_warning(t, p) or _lists(["ref", "llama", "llama_ggml"])(t, p)),
    dict(name="plugins-plugin-path-env-repeats", rc=0, env={"RADIANCE_PLUGIN_PATH": ":{PLUGINS}::{PLUGINS}/:"},
         argv=["{B}/rad-info", "--plugins"],
         check=lambda t, p: _no_warning(t, p) or _lists(["ref", "llama", "llama_ggml"])(t, p)),
    dict(name="plugins-plugin-dir-empty", rc=1, stderr=r"^rad-info: --plugin-dir: an empty folder name$",
         argv=["{B}/rad-info", "--plugins", "--plugin-dir", ""]),
    dict(name="plugins-plugin-dir-empty-radiance", rc=1, stderr=r"^radiance: --plugin-dir: an empty folder name$",
         argv=["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "", "-p", "hi", "-n", "1"], timeout=60),
    dict(name="plugins-plugin-path-too-long", rc=1, env={"RADIANCE_PLUGIN_PATH": ":".join("/nonexistent/d%d" % i for i in range(3000))},
         stderr=r"^rad-info: the plugin path .* names more than 64 folders$", argv=["{B}/rad-info", "--plugins"]),
    dict(name="plugins-strict-bad-value", rc=1, env={"RADIANCE_PLUGINS_STRICT": "yes"},
         stderr=r"^rad-info: RADIANCE_PLUGINS_STRICT: 'yes' is not 0 or 1$", argv=["{B}/rad-info", "--plugins"]),
    dict(name="plugins-same-name-twice", rc=0,
         setup=lambda t: (os.makedirs(os.path.join(t, "p")),
                          shutil.copy(os.path.join(_b(), "plugins", "kern_ref.so"), os.path.join(t, "p", "kern_ref_copy.so"))),
         argv=["{B}/rad-info", "--plugins", "--plugin-dir", "{T}/p"],
         stderr=r"warning: plugin {B}/plugins/kern_ref\.so skipped: two plugins named 'ref': this one and {T}/p/kern_ref_copy\.so",
         check=_lists(["ref"])),
]


# The server: bad plugins beside the real ones warn once at start-up and it serves.
def _serve_with_bad(t):
    _copy("kern_bad.so")(t)  # RAD_TEST_BADLIB unset: a NULL table
    _text("x.so")(t)


def _serves(port, t):
    import json
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, method="POST",
                                 data=json.dumps({"prompt": "The capital of France is", "max_tokens": 2,
                                                  "temperature": 0}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        if r.status != 200 or not json.load(r).get("choices"):
            return "completion status %d" % r.status
    with open(os.path.join(t, "server.log"), "rb") as f:
        log = f.read().decode(errors="replace")
    for name in ("kern_bad.so", "x.so"):
        want = "radiance: warning: plugin %s/p/%s skipped: " % (t, name)
        if log.count(want) != 1:
            return "want one warning %r in the log: %r" % (want, log[-600:])
    return None


SERVER_CASES = [
    dict(name="plugins-server-serves-beside-bad-plugins", setup=_serve_with_bad, args=["--plugin-dir", "{T}/p"],
         run=_serves, timeout=60),
]

# rad-info --plugins lists the files it skipped, with the reason (and in --json)
CASES.append(dict(name="plugins-rad-info-lists-skipped", setup=_text("x.so"), rc=0,
                  argv=["{B}/rad-info", "--plugins", "--plugin-dir", "{T}/p"],
                  check=lambda t, p: None if ("  %s/p/x.so: cannot load" % t) in p.stdout.decode() else "not listed"))

# A valid library whose init fails: among "all installed" it is left out with one warning and the
# rest serve; named in --kernels, or under strict mode, the start fails naming it.
_INIT = {"RAD_TEST_BADLIB": "init-fails"}
_RUN = ["{B}/radiance", "--model", "{MODEL}", "--plugin-dir", "{T}/p", "-p", "The capital of France is", "-n", "2",
        "--temp", "0", "--threads", "2"]
CASES += [
    dict(name="plugins-init-fails-left-out", setup=_copy("kern_bad.so"), env=_INIT, rc=0, argv=_RUN,
         stderr=r"^radiance: warning: kernel library 'kern_bad' \({T}/p/kern_bad\.so\) skipped: init failed", timeout=60),
    dict(name="plugins-init-fails-named", setup=_copy("kern_bad.so"), env=_INIT, rc=1,
         argv=_RUN + ["--kernels", "kern_bad,ref"],
         stderr=r"^radiance: kernel library 'kern_bad' \({T}/p/kern_bad\.so\): init failed$", timeout=60),
    dict(name="plugins-init-fails-strict", setup=_copy("kern_bad.so"), env=dict(_INIT, RADIANCE_PLUGINS_STRICT="1"), rc=1,
         argv=_RUN, stderr=r"init failed \(RADIANCE_PLUGINS_STRICT=1\)$", timeout=60),
]
