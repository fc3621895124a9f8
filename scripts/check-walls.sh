#!/bin/sh
# check-walls.sh — the layout's include walls, read from the sources:
#   arch/ and kernels/ include only abi/ (and system headers);
#   libcommon/ never includes arch/, kernels/ or tools/;
#   a tool includes libcommon/ and abi/, never another tool;
#   the engine is the one owner of its state and KV cache: libcommon/rad_engine_int.h is
#   rad_engine.c's alone and libcommon/rad_kvcache.h the engine's (rad_engine.c,
#   rad_engine_int.h, rad_kvcache.c); no tool and no other libcommon file includes either
#   (tests may, to check internals).
# Prints each breach and exits 1 if there is any.
set -u
cd "${1:-.}" || exit 2
breach() { echo "walls: $1: includes \"$2\" ($3)"; }
tmp=$(mktemp)
for f in $(find arch kernels libcommon tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null); do
    # quoted includes, and angle includes of the project's own folders
    grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("[^"]+"|<(abi|arch|kernels|libcommon|tools)/[^>]+>)' "$f" \
        | sed -E 's/.*["<]([^">]+)[">].*/\1/' | while read -r inc; do
        dir=$(dirname "$f")
        # resolve relative includes against the file's folder, else against the repo root
        if [ -e "$dir/$inc" ]; then path=$(realpath --relative-to=. "$dir/$inc"); else path=$inc; fi
        case "$f" in
        arch/*|kernels/*)
            case "$path" in abi/*) ;; arch/*) [ "${f%%/*}" = arch ] || breach "$f" "$inc" "a plugin sees only abi/";;
                kernels/*) [ "${f%%/*}" = kernels ] || breach "$f" "$inc" "a plugin sees only abi/";;
                *) breach "$f" "$inc" "a plugin sees only abi/";; esac;;
        libcommon/*)
            case "$path" in arch/*|kernels/*|tools/*) breach "$f" "$inc" "libcommon loads plugins with dlopen and knows no tool";;
                libcommon/rad_engine_int.h) [ "$f" = libcommon/rad_engine.c ] ||
                    breach "$f" "$inc" "the engine's state is rad_engine.c's: use rad_engine.h";;
                libcommon/rad_kvcache.h) case "$f" in libcommon/rad_engine.c|libcommon/rad_engine_int.h|libcommon/rad_kvcache.c) ;;
                    *) breach "$f" "$inc" "the engine owns the KV cache: ask it (rad_engine_kv_*)";; esac;;
            esac;;
        tools/*)
            tool=$(echo "$f" | cut -d/ -f2)
            case "$path" in libcommon/rad_engine_int.h) breach "$f" "$inc" "a tool sees the engine through rad_engine.h only";;
                libcommon/rad_kvcache.h) breach "$f" "$inc" "the engine owns the KV cache: a tool asks it (rad_engine_kv_*)";;
                libcommon/*|abi/*) ;; tools/"$tool"/*) ;;
                arch/*|kernels/*|tools/*) breach "$f" "$inc" "a tool sees libcommon/ and abi/ only";; esac;;
        esac
    done
done > "$tmp" 2>&1
if [ -s "$tmp" ]; then cat "$tmp"; rm -f "$tmp"; exit 1; fi
rm -f "$tmp"
echo "walls: arch/ kernels/ libcommon/ tools/ include only what they may"
