#!/usr/bin/env bash
# The main job: build pagellm and serve the real stories260K model with the OpenAI-compatible API
# on http://127.0.0.1:8000 (extra arguments go to `pagellm serve`, e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/pagellm serve -m stories260K --kv-cache-memory 256M "$@"
