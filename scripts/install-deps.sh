#!/bin/sh
# install-deps.sh — installs what Radiance builds and tests with, from Debian 12's packages.
# Idempotent; run as root (or it uses sudo).
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev
      libarchive-dev libzstd-dev libjansson-dev libxxhash-dev libpcre2-dev libcriterion-dev
      libmicrohttpd-dev systemd python3 python3-pip python3-venv jq nix-bin"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && { echo "install-deps: all present"; exit 0; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
