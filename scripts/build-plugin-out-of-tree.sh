#!/bin/sh
# build-plugin-out-of-tree.sh — checks that a third party can build plugins from an installed
# Radiance with pkg-config alone (docs/PLUGINS.md, "Building a plugin out of tree"):
#   1. `make install` into a scratch DESTDIR (or, with RADIANCE_PREFIX=DIR, use an existing
#      installation at DIR instead);
#   2. outside the tree, build tests/plugins/kern_test.c (a kernel library) and a small
#      architecture plugin with `cc $(pkg-config --cflags radiance) -fPIC -shared ...`;
#   3. check that each exports its entry points and nothing else, and load each with a
#      small loader built against the installed <abi/rad_plugin.h>: kind, name, ABI.
# Run from the repository root. Exits 0 when all of it works, 1 naming the first failure.
set -eu
CC=${CC:-cc}
root=$(pwd)
[ -f "$root/tests/plugins/kern_test.c" ] || { echo "build-plugin-out-of-tree: run from the repository root"; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
fail() { echo "build-plugin-out-of-tree: $*"; exit 1; }

if [ -n "${RADIANCE_PREFIX:-}" ]; then
    prefix=$RADIANCE_PREFIX
else
    make -s install DESTDIR="$work/stage" PREFIX=/opt/radiance >"$work/install.log" 2>&1 ||
        { tail -20 "$work/install.log"; fail "make install failed"; }
    prefix=$work/stage/opt/radiance
fi
pcdir=$prefix/lib/pkgconfig
[ -f "$pcdir/radiance.pc" ] || fail "no $pcdir/radiance.pc (make install must install packaging/radiance.pc.in)"
pc() { PKG_CONFIG_PATH=$pcdir pkg-config --define-variable=prefix="$prefix" "$@" radiance; }
pc --validate || fail "radiance.pc does not validate"
cflags=$(pc --cflags) || fail "pkg-config --cflags radiance failed"
for h in abi/rad_plugin.h abi/rad_types.h abi/rad_meta.h abi/rad_arch.h abi/rad_kernels.h arch/rad_arch.h; do
    [ -f "$prefix/include/radiance/$h" ] || fail "not installed: include/radiance/$h"
done

mkdir -p "$work/src"
cp "$root/tests/plugins/kern_test.c" "$work/src/"
cat >"$work/src/oot_arch.c" <<'EOF'
/* The smallest architecture plugin: declares nothing, steps nothing; it includes the installed
 * blocks and reads a key with the metadata getters, so those build out of tree too. */
#include <arch/rad_arch.h>
#include <arch/common/rad_block_attn.h>
#include <arch/common/rad_block_mlp.h>

static int declare(RadBuilder *b, const RadModelMeta *m, const RadBuildCtx *c) {
    uint32_t n;
    (void)c;
    if (rad_meta_need_u32(b, m, "oot.count", &n) != 0) return 1;
    rad_note(b, "an out-of-tree build check (%u)", n);
    return 0;
}
static void step(RadCtx *c, const struct RadBatch *bt) { (void)c, (void)bt; }
static const RadArchOps ops = {declare, step, NULL, NULL, NULL, 0};
RAD_ARCH_PLUGIN(ops, "oot_demo", "", "0.1.0", "an out-of-tree build check")
EOF
cat >"$work/src/load.c" <<'EOF'
/* load PATH: dlopen a plugin and print its rad_plugin_info as "kind name major.minor". */
#include <abi/rad_plugin.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!dl) { printf("cannot load: %s\n", dlerror()); return 1; }
    void *p = dlsym(dl, "rad_plugin_info");
    rad_plugin_info_fn f;
    memcpy(&f, &p, sizeof p);
    if (!f) { printf("no rad_plugin_info\n"); return 1; }
    const RadPluginInfo *i = f();
    printf("%u %s %u.%u\n", i->kind, i->name, i->abi_major, i->abi_minor);
    return i->abi_major == RAD_ABI_MAJOR && i->abi_minor <= RAD_ABI_MINOR ? 0 : 1;
}
EOF
cd "$work/src"
plugin_flags="-std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared -fvisibility=hidden"
# shellcheck disable=SC2086 # cflags and plugin_flags are word lists
$CC $cflags $plugin_flags -o kern_test.so kern_test.c -lm || fail "kern_test.c does not build against the installed headers"
# shellcheck disable=SC2086
$CC $cflags $plugin_flags -o oot_arch.so oot_arch.c || fail "an architecture plugin does not build against the installed headers"
# shellcheck disable=SC2086
$CC $cflags -std=c11 -Wall -Wextra -Werror -o load load.c -ldl || fail "the loader does not build"

exports() { nm -D --defined-only "$1" | awk '$2 == "T" || $2 == "D" || $2 == "B" || $2 == "R" { print $3 }' | sort | tr '\n' ' '; }
got=$(exports kern_test.so)
[ "$got" = "rad_kernels rad_plugin_info " ] || fail "kern_test.so exports: $got"
got=$(exports oot_arch.so)
want="rad_arch_audio_format rad_arch_chat_format rad_arch_declare rad_arch_id rad_arch_probe rad_arch_quant rad_arch_serves_imports rad_arch_step rad_plugin_info "
[ "$got" = "$want" ] || fail "oot_arch.so exports: $got"

abi=$(pc --modversion)
# the two spellings of the ABI in radiance.pc agree (abi_minor once stayed at 8 while Version moved on)
[ "$(pc --variable=abi_major).$(pc --variable=abi_minor)" = "$abi" ] ||
    fail "radiance.pc: abi_major.abi_minor $(pc --variable=abi_major).$(pc --variable=abi_minor) is not its Version $abi"
out=$(./load ./kern_test.so) || fail "kern_test.so: $out"
[ "$out" = "2 kern_test $abi" ] || fail "kern_test.so: rad_plugin_info says '$out'"
out=$(./load ./oot_arch.so) || fail "oot_arch.so: $out"
[ "$out" = "1 oot_demo $abi" ] || fail "oot_arch.so: rad_plugin_info says '$out'"
echo "build-plugin-out-of-tree: a kernel library and an architecture plugin build and load from $(pc --variable=includedir) via pkg-config (ABI $abi)"
