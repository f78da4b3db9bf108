#!/usr/bin/env bash
# Makes tests/data/archs/NAME.json, the llama.cpp references of tests/integration/
# test_wtype_reference.c's architectures (issue 14 part 1): random-weight models from
# `pagellm mkmodel --arch ...` with the flags below (the test makes the same files again: the same
# flags and seed give the same bytes), in f32 and f16, then scripts/wtype_ref.c --long (linked
# against llama.cpp's library: CPU, f32 KV cache, no flash attention, prompts of 6, 41 and 100
# tokens, 32 greedy steps) computes the continuations on each file.
#   LLAMA_CPP=/path/to/llama.cpp bash scripts/make_arch_refs.sh [BUILD_DIR]
# llama.cpp built by ../shared/peer/build-llama-cpp.sh. Only the JSON (a few KB each) is committed.
# Keep the MODELS table equal to ARCHS in test_wtype_reference.c, and ADAPTERS to its LORAS.
# Then the LoRA references (issue 36): `mkmodel --lora-of` an f32 model of the flags below (plus
# the case's own), each adapter applied at scale 1 (wtype_ref --lora: llama_adapter_lora_init,
# llama_set_adapters_lora), into tests/data/lora/NAME.json (ONLY=lora makes just those).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
L=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp built by ../shared/peer/build-llama-cpp.sh}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
gcc -O2 -Wall -Wextra -o "$tmp/wtype_ref" scripts/wtype_ref.c -I"$L/include" -I"$L/ggml/include" \
    -L"$L/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$L/build/bin" -lm
base="--vocab-from ../shared/models/stories260K.gguf --dim 256 --layers 2 --heads 8 --kv-heads 4 --ffn 768 --seed 11"
# NAME|mkmodel flags[|types] (each made in f32 and f16, or in the types given)
MODELS=(
  "llama3|--rope-scaling llama3 --rope-factor 8 --rope-orig-ctx 64 --rope-base 500000"
  "yarn|--rope-scaling yarn --rope-factor 4 --rope-orig-ctx 64 --rope-attn-factor 0.9"
  "gemma2|--arch gemma2 --head-dim 48 --attn-softcap 0.5 --final-softcap 3 --sliding-window 32"
  "gemma2-46|--arch gemma2 --layers 46 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 128 --sliding-window 32"
  "gemma2-pattern|--arch gemma2 --layers 3 --swa-pattern 3 --sliding-window 16 --attn-softcap 0.5"
  "phi3|--arch phi3 --sliding-window 32"
  "phi3-long|--arch phi3 --ctx 4096 --rope-scaling longrope --rope-factor 8 --rope-orig-ctx 64 --rope-attn-factor 1.2"
  "phi3-short|--arch phi3 --rope-scaling longrope --rope-orig-ctx 2048"
  "qwen3|--arch qwen3 --head-dim 48 --rope-base 1000000"
  "mistral3|--arch mistral3 --head-dim 48 --rope-scaling yarn --rope-factor 16 --rope-orig-ctx 16 --attn-temp-scale 0.1 --yarn-log-mul 0.7 --yarn-beta-fast 16 --yarn-beta-slow 2"
  "gemma3|--arch gemma3 --swa-pattern 2 --head-dim 48 --sliding-window 16 --rope-base 1000000 --rope-base-swa 10000 --rope-scaling linear --rope-factor 8"
  "gemma3-62|--arch gemma3 --layers 62 --dim 64 --heads 4 --kv-heads 2 --head-dim 32 --ffn 128 --sliding-window 32 --final-softcap 3"
  "qwen3moe|--arch qwen3moe --head-dim 48 --rope-base 1000000 --experts 8 --experts-used 3 --expert-ffn 128"
  "mixtral|--experts 4 --experts-used 2 --ffn 256 --rope-base 1000000"
  "gpt-oss|--arch gpt-oss --head-dim 48 --sliding-window 32 --experts 8 --experts-used 3 --expert-ffn 128 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 64 --rope-base 150000|f32 f16 mxfp4"
  "gemma4|--arch gemma4 --layers 2 --swa-pattern 2 --head-dim 64 --head-dim-swa 32 --kv-heads-full 2 --sliding-window 16 --rope-base 1000000 --rope-base-swa 10000 --final-softcap 3"
  "gemma4-moe|--arch gemma4 --layers 2 --swa-pattern 2 --head-dim 64 --head-dim-swa 32 --kv-heads-full 2 --sliding-window 16 --rope-base 1000000 --rope-base-swa 10000 --final-softcap 3 --ffn 256 --experts 8 --experts-used 3 --expert-ffn 256|f32 q8_0 q4_k_m"
  "gemma4-moe-split|--arch gemma4 --layers 2 --swa-pattern 2 --head-dim 64 --head-dim-swa 32 --kv-heads-full 2 --sliding-window 16 --rope-base 1000000 --rope-base-swa 10000 --final-softcap 3 --ffn 256 --experts 8 --experts-used 3 --expert-ffn 256 --split-experts|f32"
  "gemma4-ple|--arch gemma4 --layers 4 --swa-pattern 2 --head-dim 64 --head-dim-swa 32 --kv-heads 2 --kv-heads-full 1 --sliding-window 16 --shared-kv-layers 2 --per-layer-dim 32 --ffn 256 --ffn-wide 512"
)
# ONLY=NAME[,NAME...] makes just those (the others' JSON stays as committed)
mkdir -p tests/data/archs
for m in "${MODELS[@]}"; do
  IFS='|' read -r name flags types <<< "$m"
  [[ -n "${ONLY:-}" && ",$ONLY," != *",$name,"* ]] && continue
  for t in ${types:-f32 f16}; do
    # shellcheck disable=SC2086
    "$build/pagellm" mkmodel "$tmp/$name.$t.gguf" $base $flags --type $t >/dev/null
    "$tmp/wtype_ref" "$tmp/$name.$t.gguf" "$name.$t" --long > "tests/data/archs/$name.$t.json"
    echo "tests/data/archs/$name.$t.json"
  done
done
# NAME|the base's mkmodel flags beyond $base|mkmodel --lora-of flags
ADAPTERS=(
  "all-r8.f32||--lora-rank 8 --lora-alpha 16 --seed 3"
  "qv-up-r4.f32||--lora-rank 4 --lora-alpha 8 --lora-targets attn_q,attn_v,ffn_up --seed 5"
  "all-r8.f16||--lora-rank 8 --lora-alpha 16 --seed 3 --type f16"
  "gemma3.f32|--arch gemma3 --swa-pattern 2 --head-dim 48 --sliding-window 16|--lora-rank 8 --seed 7"
  "qwen3moe-attn.f32|--arch qwen3moe --head-dim 48 --experts 8 --experts-used 3 --expert-ffn 128|--lora-rank 8 --lora-targets attn_q,attn_k,attn_v,attn_output --seed 9"
)
[[ -n "${ONLY:-}" && ",$ONLY," != *",lora,"* ]] && exit 0
mkdir -p tests/data/lora
for a in "${ADAPTERS[@]}"; do
  IFS='|' read -r name bflags flags <<<"$a"
  # shellcheck disable=SC2086
  "$build/pagellm" mkmodel "$tmp/base.gguf" $base $bflags >/dev/null
  # shellcheck disable=SC2086
  "$build/pagellm" mkmodel "$tmp/$name.gguf" --lora-of "$tmp/base.gguf" $flags >/dev/null
  "$tmp/wtype_ref" "$tmp/base.gguf" "lora-$name" --lora "$tmp/$name.gguf" > "tests/data/lora/$name.json"
  echo "tests/data/lora/$name.json"
done
