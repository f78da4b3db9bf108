#!/usr/bin/env bash
# Rerank and score routes (issue 36): a random reranker made by `pagellm mkmodel --arch bert
# --pooling rank` with the flags of tests/data/embeddings/bert-rank-f32.json, served, and every
# route shape curled: /v1/rerank, /rerank, /v2/rerank (vLLM / Jina / Cohere: query + documents ->
# results sorted by relevance_score, top_n, return_documents) and /v1/score (text_1 vs text_2,
# string or list). Scores equal llama.cpp's (the JSON reference) within 1e-5; the API key is
# required on every route; bad input is a 400 naming the field and the server keeps serving;
# the requests are counted in /metrics; a model that is not a reranker is a 400 naming 'model'.
. "$(dirname "$0")/server_lib.sh"
DIR=$(cd "$(dirname "$0")" && pwd)
REF="$DIR/../data/embeddings/bert-rank-f32.json"
FLAGS=$(python3 -c "import json; print(json.load(open('$REF'))['mkmodel'])")
# shellcheck disable=SC2086
"$PL_BINARY" mkmodel "$TMP/rank.gguf" --vocab-from "$PL_SHARED_DIR/models/stories260K.gguf" \
    $FLAGS >/dev/null || { bad "mkmodel"; finish; }
MODEL="$TMP/rank.gguf"
SERVED_NAME=rr start_server --api-key sekret
K=(-H 'Authorization: Bearer sekret' -H 'Content-Type: application/json')

# The first three reference pairs share one query: rerank them; expected order from the reference.
python3 - "$REF" >"$TMP/req.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cases"][:3]
print(json.dumps({"model": "rr", "query": c[0]["query"], "documents": [x["document"] for x in c]}))
PY
want() { # want PY-EXPR-over-results: compare with the reference
    python3 - "$REF" "$TMP/body" "$1" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["cases"]
j = json.load(open(sys.argv[2]))
ok = eval(sys.argv[3])
sys.exit(0 if ok else 1)
PY
}
for route in /v1/rerank /rerank /v2/rerank; do
    http POST "$route" "${K[@]}" --data-binary @"$TMP/req.json"
    check "$route: 200 (got $STATUS: $BODY)" test "$STATUS" = 200
    check "$route: 3 results sorted by relevance_score, indices a permutation" want \
        'len(j["results"]) == 3 and sorted(r["index"] for r in j["results"]) == [0, 1, 2] and all(j["results"][i]["relevance_score"] >= j["results"][i+1]["relevance_score"] for i in range(2))'
    check "$route: scores equal llama.cpp's within 1e-5" want \
        'all(abs(r["relevance_score"] - ref[r["index"]]["score"][0]) <= 1e-5 for r in j["results"])'
    check "$route: documents returned, model and usage" want \
        'all(r["document"]["text"] == ref[r["index"]]["document"] for r in j["results"]) and j["model"] == "rr" and j["usage"]["total_tokens"] == sum(len(x["ids"]) for x in ref[:3]) and j["id"].startswith("rerank-")'
done
# top_n, return_documents false, Cohere's {"text": ...} documents.
http POST /v1/rerank "${K[@]}" -d '{"query": "what is a cat?", "documents": [{"text": "a cat is a small furry animal."}, "the dog ran home."], "top_n": 1, "return_documents": false}'
check "top_n 1: one result, no document (got $STATUS: $BODY)" want \
    'len(j["results"]) == 1 and "document" not in j["results"][0] and j["results"][0]["index"] == 0 and abs(j["results"][0]["relevance_score"] - ref[0]["score"][0]) <= 1e-5'

# /v1/score: one text_1 against a list; lists pairwise; strings.
python3 - "$REF" >"$TMP/score.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cases"]
print(json.dumps({"text_1": [x["query"] for x in c], "text_2": [x["document"] for x in c]}))
PY
http POST /v1/score "${K[@]}" --data-binary @"$TMP/score.json"
check "score lists: 200 (got $STATUS)" test "$STATUS" = 200
check "score lists: every pair equals llama.cpp's within 1e-5" want \
    'j["object"] == "list" and len(j["data"]) == len(ref) and all(d["index"] == i and d["object"] == "score" and abs(d["score"] - ref[i]["score"][0]) <= 1e-5 for i, d in enumerate(j["data"]))'
http POST /v1/score "${K[@]}" -d '{"text_1": "what is a cat?", "text_2": ["a cat is a small furry animal.", "the dog ran home."]}'
check "score one against a list" want \
    'len(j["data"]) == 2 and all(abs(j["data"][i]["score"] - ref[i]["score"][0]) <= 1e-5 for i in range(2))'
http POST /v1/score "${K[@]}" -d '{"text_1": "Hello!", "text_2": "Hello, world! 123"}'
check "score strings" want 'len(j["data"]) == 1 and abs(j["data"][0]["score"] - ref[5]["score"][0]) <= 1e-5'

# The API key on every route.
for route in /v1/rerank /rerank /v2/rerank /v1/score; do
    http POST "$route" -d '{"query": "a", "documents": ["b"], "text_1": "a", "text_2": "b"}'
    check "$route without the key: 401 (got $STATUS)" test "$STATUS" = 401
done

# Bad input: 400 naming the field; the server goes on.
bad_input() { # bad_input ROUTE BODY FIELD
    http POST "$1" "${K[@]}" -d "$2"
    check "$1 $2: 400 naming '$3' (got $STATUS: $BODY)" \
        test "$STATUS:$(json_get 'j["error"]["param"]')" = "400:$3"
}
bad_input /v1/rerank '{"documents": ["a"]}' query
bad_input /v1/rerank '{"query": 3, "documents": ["a"]}' query
bad_input /v1/rerank '{"query": "", "documents": ["a"]}' query
bad_input /v1/rerank '{"query": "q"}' documents
bad_input /v1/rerank '{"query": "q", "documents": []}' documents
bad_input /rerank '{"query": "q", "documents": "a"}' documents
bad_input /v2/rerank '{"query": "q", "documents": ["a", ""]}' documents
bad_input /v2/rerank '{"query": "q", "documents": ["a", 5]}' documents
bad_input /v1/rerank '{"query": "q", "documents": [{"txt": "a"}]}' documents
bad_input /v1/rerank '{"query": "q", "documents": ["a"], "top_n": 0}' top_n
bad_input /v1/rerank '{"query": "q", "documents": ["a"], "top_n": "2"}' top_n
bad_input /v1/rerank '{"query": "q", "documents": ["a"], "return_documents": 1}' return_documents
bad_input /v1/rerank '{"query": "q", "documents": ["a"], "model": 7}' model
bad_input /v1/score '{"text_2": "a"}' text_1
bad_input /v1/score '{"text_1": "a", "text_2": []}' text_2
bad_input /v1/score '{"text_1": ["a", "b"], "text_2": ["a", "b", "c"]}' text_2
bad_input /v1/score '{"text_1": "a", "text_2": [1]}' text_2
python3 -c 'import json; print(json.dumps({"query": "q", "documents": ["d"] * 2049}))' >"$TMP/big.json"
http POST /v1/rerank "${K[@]}" --data-binary @"$TMP/big.json"
check "2049 documents: 400 naming 'documents' (got $STATUS)" \
    test "$STATUS:$(json_get 'j["error"]["param"]')" = "400:documents"
long=$(python3 -c 'print("word " * 600)')
bad_input /v1/rerank "{\"query\": \"q\", \"documents\": [\"a\", \"$long\"]}" documents
http POST /v1/embeddings "${K[@]}" -d '{"input": "a"}'
check "embeddings from a reranker: 400 naming 'model' (got $STATUS)" \
    test "$STATUS:$(json_get 'j["error"]["param"]')" = "400:model"
http POST /v1/rerank "${K[@]}" --data-binary @"$TMP/req.json"
check "still serving after bad input (got $STATUS)" test "$STATUS" = 200

# Metrics: the scored pairs counted as successful requests.
http GET /metrics
n=$(grep '^vllm:e2e_request_latency_seconds_count' "$TMP/body" | awk '{s += $2} END {print s + 0}')
check "metrics counted the 24 scored pairs (latency count $n)" test "$n" -ge 24
stop_clean rerank

# A model that is not a reranker: 400 naming 'model' on every route.
MODEL="$PL_SHARED_DIR/models/stories260K.gguf"
start_server
for route in /v1/rerank /rerank /v2/rerank /v1/score; do
    http POST "$route" -H 'Content-Type: application/json' \
        -d '{"query": "a", "documents": ["b"], "text_1": "a", "text_2": "b"}'
    check "$route on a generation model: 400 naming 'model' (got $STATUS: $BODY)" \
        test "$STATUS:$(json_get 'j["error"]["param"]')" = "400:model"
done
stop_clean stories
finish
