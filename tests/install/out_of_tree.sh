#!/usr/bin/env bash
# An application outside this repository builds against the installed
# library with nothing but pkg-config: install into a staging root, compile
# the runtime issue's example with `c++ -std=c++20 app.cpp $(pkg-config
# --cflags --libs gossamer)`, and run it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$root/$build" --destdir "$stage" --quiet >/dev/null
prefix=$(meson introspect "$root/$build" --buildoptions |
  python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
pcdir=$(dirname "$(find "$stage" -name gossamer.pc | head -1)")
[ -f "$pcdir/gossamer.pc" ] || { echo "gossamer.pc was not installed"; exit 1; }
[ -f "$stage$prefix/include/gossamer/gossamer.hpp" ] || { echo "headers not under include/gossamer"; exit 1; }
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$stage$prefix" --cflags --libs gossamer)
mkdir -p "$stage/app"
cp "$root/tools/examples/hello_trust.cpp" "$stage/app/app.cpp"
cd "$stage/app"
# shellcheck disable=SC2086
c++ -std=c++20 app.cpp $flags -o app
libdir=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$stage$prefix" --variable=libdir gossamer)
LD_LIBRARY_PATH="$libdir" ./app 4
echo "out-of-tree: built and ran against $(basename "$pcdir")/gossamer.pc"
