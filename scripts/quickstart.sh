#!/usr/bin/env bash
# The first command of the README: install what is missing, build ft, and show it working on
# the built-in demo model (random weights, written by `ft synth` into a cache folder once).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j"$(nproc)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ft"
demo="$cache/demo-qwen3moe.gguf"
if [ ! -f "$demo" ]; then
  mkdir -p "$cache"
  echo "writing the demo model (a small qwen3moe with RANDOM weights) to $demo" >&2
  build/ft synth "$demo.tmp" && mv "$demo.tmp" "$demo"
fi
build/ft run -m "$demo" -p "The expert cache" -n 32 --seed 1
