#!/bin/sh
# install-deps.sh — installs what Radiance builds and tests with, from Debian 12's packages.
# Idempotent; run as root (or it uses sudo).
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev
      libarchive-dev libzstd-dev libjansson-dev libxxhash-dev libpcre2-dev libcriterion-dev
      libmicrohttpd-dev systemd python3 python3-pip python3-venv jq nix-bin"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -z "$missing" ]; then
    echo "install-deps: all present"
else
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# The end-to-end tests' Python (tests/e2e/run.sh): a venv in .venv-e2e (git-ignored) with the
# official openai client from PyPI, pinned; its dependencies (httpx2, pydantic, ...) come with it;
# and jsonschema, the validator structured outputs are checked with (tests/e2e/test_structured.py).
OPENAI_VERSION=3.57.0
JSONSCHEMA_VERSION=4.25.1
VENV="$(cd "$(dirname "$0")/.." && pwd)/.venv-e2e"
if "$VENV/bin/python" -c "import sys, openai, jsonschema, importlib.metadata as m
sys.exit(openai.__version__ != '$OPENAI_VERSION' or m.version('jsonschema') != '$JSONSCHEMA_VERSION')" 2>/dev/null; then
    echo "install-deps: .venv-e2e has openai $OPENAI_VERSION, jsonschema $JSONSCHEMA_VERSION"
else
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "openai==$OPENAI_VERSION" \
        "jsonschema==$JSONSCHEMA_VERSION"
    echo "install-deps: .venv-e2e: openai $OPENAI_VERSION, jsonschema $JSONSCHEMA_VERSION installed"
fi
