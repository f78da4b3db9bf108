#!/usr/bin/env bash
# The main job: build pagellm and generate text with the real stories260K model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/pagellm generate -m stories260K -p "Once upon a time" --max-tokens 64 "$@"
