#!/bin/sh
# check-walls.sh — the layout's include walls, read from the sources (docs/LAYOUT.md):
#   arch/ and kernels/ include only abi/ (and system headers); a kernel library (kernels/<lib>/)
#   only its own folder besides;
#   libcommon/ never includes arch/, kernels/ or tools/;
#   inside libcommon/, a folder includes only itself and the folders below it, in the order
#     base < io < format < tensor < tok < plugin < text < runtime
#   (nothing may include libcommon/runtime/ but tools/, tests/ and fuzz/, and no file includes
#   an internal header *_int.h of another folder);
#   no include cycle between libcommon's files (a.c, a.h and its private a_int.h count as one unit);
#   a tool includes libcommon/ and abi/, never another tool, and no internal header;
#   the engine is the one owner of its state and KV cache: runtime/rad_engine_int.h is
#   rad_engine.c's alone and runtime/rad_kvcache.h the engine's (rad_engine.c, rad_engine_int.h,
#   rad_kvcache.c); no tool and no other libcommon file includes either (tests may, to check
#   internals).
# Prints each breach and exits 1 if there is any. `check-walls.sh --self-test` plants a breach of
# each kind in a copy of the tree and fails unless every one is caught.
set -u
LAYERS="base io format tensor tok plugin text runtime"
layer_of() { i=0; for l in $LAYERS; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }

if [ "${1:-}" = "--self-test" ]; then
    root=$(pwd); fails=0
    plant() { # $1 file, $2 line, $3 what the report must say
        t=$(mktemp -d); cp -r "$root/abi" "$root/arch" "$root/kernels" "$root/libcommon" "$root/tools" "$root/scripts" "$t/"
        printf '%s\n' "$2" >> "$t/$1"
        out=$(cd "$t" && sh scripts/check-walls.sh 2>&1); rc=$?
        if [ $rc -eq 0 ] || ! printf '%s' "$out" | grep -q "$3"; then
            echo "walls self-test: planting '$2' in $1 was not caught as '$3' (rc $rc): $out"; fails=1
        fi
        rm -rf "$t"
    }
    plant libcommon/base/rad_err.c '#include "libcommon/format/rad_model.h"' "base may include only"
    plant libcommon/plugin/rad_plugins.c '#include "libcommon/runtime/rad_engine.h"' "plugin may include only"
    plant libcommon/tok/rad_tok.c '#include "libcommon/text/rad_chat.h"' "tok may include only"
    plant libcommon/format/rad_model.h '#include "libcommon/format/rad_gguf.h"' "include cycle"
    plant tools/rad-info/main.c '#include "libcommon/runtime/rad_engine_int.h"' "internal header"
    plant tools/rad-info/main.c '#include "tools/radiance/radiance.h"' "a tool sees libcommon/ and abi/ only"
    plant arch/llama/llama.c '#include "libcommon/base/rad_err.h"' "a plugin sees only abi/"
    plant libcommon/text/rad_chat.c '#include "arch/rad_arch.h"' "libcommon loads plugins with dlopen"
    plant libcommon/runtime/rad_sched.c '#include "rad_kvcache.h"' "the engine owns the KV cache"
    plant kernels/ref/ref_misc.c '#include "kernels/r4d/r4d_host.h"' "a kernel library sees only its own folder"
    plant tools/radiance/server.c '#include "../../libcommon/runtime/rad_kvcache.h"' "a tool asks it"
    [ $fails -eq 0 ] && echo "walls self-test: 11 planted breaches, each caught"
    exit $fails
fi

cd "${1:-.}" || exit 2
breach() { echo "walls: $1: includes \"$2\" ($3)"; }
tmp=$(mktemp); edges=$(mktemp)
for f in $(find arch kernels libcommon tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort); do
    # quoted includes, and angle includes of the project's own folders
    grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("[^"]+"|<(abi|arch|kernels|libcommon|tools)/[^>]+>)' "$f" \
        | sed -E 's/.*["<]([^">]+)[">].*/\1/' | while read -r inc; do
        dir=$(dirname "$f")
        # resolve relative includes against the file's folder, else against the repo root
        if [ -e "$dir/$inc" ]; then path=$(realpath --relative-to=. "$dir/$inc"); else path=$inc; fi
        case "$f" in
        arch/*|kernels/*)
            case "$path" in abi/*) ;; arch/*) [ "${f%%/*}" = arch ] || breach "$f" "$inc" "a plugin sees only abi/";;
                kernels/*) [ "${f%%/*}" = kernels ] || breach "$f" "$inc" "a plugin sees only abi/"
                    # one kernel library per folder: libref and libr4d share nothing but abi/
                    [ "$(echo "$f" | cut -d/ -f1-2)" = "$(echo "$path" | cut -d/ -f1-2)" ] ||
                        breach "$f" "$inc" "a kernel library sees only its own folder and abi/";;
                *) breach "$f" "$inc" "a plugin sees only abi/";; esac;;
        libcommon/*)
            case "$path" in
            arch/*|kernels/*|tools/*) breach "$f" "$inc" "libcommon loads plugins with dlopen and knows no tool";;
            libcommon/*)
                from=$(echo "$f" | cut -d/ -f2); to=$(echo "$path" | cut -d/ -f2)
                lf=$(layer_of "$from"); lt=$(layer_of "$to")
                if [ "$lf" -lt 0 ] || [ "$lt" -lt 0 ] || [ "$lt" -gt "$lf" ]; then
                    below=""; for l in $LAYERS; do below="$below $l"; [ "$l" = "$from" ] && break; done
                    breach "$f" "$inc" "$from may include only:$below"
                elif [ "$from" != "$to" ]; then case "$path" in *_int.h) breach "$f" "$inc" "an internal header of $to";; esac
                fi
                case "$path" in
                libcommon/runtime/rad_engine_int.h) [ "$f" = libcommon/runtime/rad_engine.c ] ||
                    breach "$f" "$inc" "the engine's state is rad_engine.c's: use rad_engine.h";;
                libcommon/runtime/rad_kvcache.h) case "$f" in
                    libcommon/runtime/rad_engine.c|libcommon/runtime/rad_engine_int.h|libcommon/runtime/rad_kvcache.c) ;;
                    *) breach "$f" "$inc" "the engine owns the KV cache: ask it (rad_engine_kv_*)";; esac;;
                esac
                # file units (a.c, a.h and a private a_int.h are one): for the cycle check
                echo "${f%.*} ${path%.*}" | sed 's/_int\b//g' >> "$edges";;
            esac;;
        tools/*)
            tool=$(echo "$f" | cut -d/ -f2)
            case "$path" in *_int.h) breach "$f" "$inc" "an internal header: tools see the public API";;
                libcommon/runtime/rad_kvcache.h) breach "$f" "$inc" "the engine owns the KV cache: a tool asks it (rad_engine_kv_*)";;
                libcommon/*|abi/*) ;; tools/"$tool"/*) ;;
                arch/*|kernels/*|tools/*) breach "$f" "$inc" "a tool sees libcommon/ and abi/ only";; esac;;
        esac
    done
done > "$tmp" 2>&1
# cycles between libcommon's file units: tsort reports any
awk '$1 != $2' "$edges" | sort -u | tsort 2>&1 >/dev/null | grep -q 'loop' && {
    echo "walls: an include cycle in libcommon/ (each unit is a.c + a.h + a_int.h):"
    awk '$1 != $2' "$edges" | sort -u | tsort 2>&1 >/dev/null | grep -v 'input contains a loop' | sed 's/^tsort: /  /'
} >> "$tmp"
rm -f "$edges"
if [ -s "$tmp" ]; then cat "$tmp"; rm -f "$tmp"; exit 1; fi
rm -f "$tmp"
echo "walls: arch/ kernels/ libcommon/ tools/ include only what they may; libcommon's folders in order ($LAYERS), no cycle"
