#!/bin/sh
# tests/gpu/prepare.sh — on the build machine: the tools, plugins and shared libraries that
# tests/gpu/check.sh needs on a GPU machine that has CUDA but not Radiance's Debian packages
# (docs/GPU.md). Builds (make tools), then fills build/gpu-carry/:
#   bin/           the five tools, stripped
#   plugins/       libref and the architecture plugins
#   plugins-cuda/  kern_r4d.so as built here (check.sh builds its own with the machine's nvcc and
#                  falls back to this one)
#   lib.tar.xz     every shared library the tools load that is not the C library's or the compiler
#                  runtime's, compressed (ICU's data alone is 30 MB: the lent machine takes 64 MiB
#                  of carried files and the working tree together)
# and prints its size.
set -eu
B=${B:-build}
make -j"$(nproc)" tools B="$B" >/dev/null
C=$B/gpu-carry
rm -rf "$C"
mkdir -p "$C/bin" "$C/plugins" "$C/plugins-cuda" "$C/lib"
for t in radiance rad-convert rad-info rad-kbench rad-tune; do
    cp "$B/$t" "$C/bin/" && strip "$C/bin/$t"
done
cp "$B"/plugins/*.so "$C/plugins/" && strip "$C"/plugins/*.so
[ -f "$B/plugins-cuda/kern_r4d.so" ] && cp "$B/plugins-cuda/kern_r4d.so" "$C/plugins-cuda/"
# the libraries' closure, leaving out glibc's and the compiler runtime's (the GPU machine's newer
# ones serve them; check.sh puts lib/ on the path of these tools alone, never of python3)
for f in "$C"/bin/* "$C"/plugins/*.so; do ldd "$f"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*|libgcc_s.so.*|libstdc++.so.*) ;;
    *) cp -L "$lib" "$C/lib/" ;;
    esac
done
(cd "$C" && tar cJf lib.tar.xz lib && rm -rf lib)
du -sh "$C"
echo "prepare.sh: $C ready; carry it: run(command='sh tests/gpu/check.sh', carry=['$C'])"
