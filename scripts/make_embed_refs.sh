#!/usr/bin/env bash
# Makes tests/data/embeddings/NAME.json, the llama.cpp references of
# tests/integration/test_embeddings.c (and stories260K-{mean,last}.json: stories260K with its
# hidden states pooled, llama.cpp's --pooling): `pagellm mkmodel --arch bert` (random weights, a WordPiece
# vocabulary mkmodel builds from stories260K's pieces), then scripts/embed_ref.c, linked against
# llama.cpp's library, tokenizes every line of tests/data/embeddings/inputs.txt with that
# vocabulary and embeds the lines that are not "tok:" lines (the model's pooling, L2-normalized).
#   LLAMA_CPP=/path/to/llama.cpp bash scripts/make_embed_refs.sh [BUILD_DIR]
# llama.cpp built by ../shared/peer/build-llama-cpp.sh. Nothing of llama.cpp is committed: only
# the JSON references (ids and vectors, a few KB).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
L=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp built by ../shared/peer/build-llama-cpp.sh}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -Wextra -o "$tmp/embed_ref" scripts/embed_ref.c -I"$L/include" -I"$L/ggml/include" \
    -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -lm
# name: mkmodel flags (the test makes the same file from the flags recorded in the JSON).
declare -A models=(
  [bert-mean-f32]="--arch bert --pooling mean --dim 128 --layers 2 --heads 4 --ffn 256 --type f32 --seed 11"
  [bert-cls-f32]="--arch bert --pooling cls --dim 64 --layers 2 --heads 2 --ffn 128 --type f32 --seed 12"
  [bert-last-f32]="--arch bert --pooling last --dim 64 --layers 3 --heads 8 --ffn 96 --type f32 --seed 13"
  [bert-mean-f16]="--arch bert --pooling mean --dim 64 --layers 2 --heads 4 --ffn 128 --type f16 --seed 14"
)
for name in "${!models[@]}"; do
  # shellcheck disable=SC2086
  "$build/pagellm" mkmodel "$tmp/$name.gguf" --vocab-from ../shared/models/stories260K.gguf \
      ${models[$name]} >/dev/null
  "$tmp/embed_ref" "$tmp/$name.gguf" "${models[$name]}" < tests/data/embeddings/inputs.txt \
      > "tests/data/embeddings/$name.json"
  echo "tests/data/embeddings/$name.json"
done
# A reranker (pooling rank): query<TAB>document pairs, the classification head's scores.
rank="--arch bert --pooling rank --dim 64 --layers 2 --heads 4 --ffn 128 --type f32 --seed 15"
# shellcheck disable=SC2086
"$build/pagellm" mkmodel "$tmp/bert-rank-f32.gguf" --vocab-from ../shared/models/stories260K.gguf \
    $rank >/dev/null
"$tmp/embed_ref" "$tmp/bert-rank-f32.gguf" "$rank" < tests/data/embeddings/rerank_inputs.txt \
    > tests/data/embeddings/bert-rank-f32.json
echo tests/data/embeddings/bert-rank-f32.json
# A generation model with llama.cpp's --pooling (pagellm serve --pooling): stories260K as is.
for pool in mean last; do
  "$tmp/embed_ref" ../shared/models/stories260K.gguf "" $pool < tests/data/embeddings/inputs.txt \
      > "tests/data/embeddings/stories260K-$pool.json"
  echo "tests/data/embeddings/stories260K-$pool.json"
done
