"""SIGTERM drill for test_server_curl.sh: python3 shutdown_client.py BASE SERVER_PID SERVER_OUT MODE

Opens a keep-alive connection, starts a 2000-token stream and a whole (non-streamed) request of
4 x 2000 tokens (long enough that a fast machine cannot finish it within the short grace of
"expire": stories260K decodes 2 x 1000 tokens in about 0.3 s), waits for the stream's first chunk, sends SIGTERM and waits for the server to say
so. Then:
  grace:  a new request on the open connection must get 503 (+ Retry-After) while the stream is
          still in flight, and both requests must still finish with every token (finish "length").
  expire: (--shutdown-timeout short) the stream must end early with finish_reason "abort" and
          [DONE], the whole request with its partial choices aborted.
Prints one "FAIL: ..." line per failed check, "OK" when all pass."""
import http.client, json, os, signal, sys, threading, time, urllib.parse

base, pid, server_out, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
u = urllib.parse.urlparse(base)
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)

def conn():
    return http.client.HTTPConnection(u.hostname, u.port, timeout=120)

keep = conn()
keep.request("GET", "/health")
r = keep.getresponse(); r.read()
check(r.status == 200, "keep-alive health %d" % r.status)

whole = {}
def whole_request():
    c = conn()
    c.request("POST", "/v1/completions", json.dumps(
        {"prompt": ["Once", "Lily", "The", "Tom"], "max_tokens": 2000, "ignore_eos": True, "temperature": 0}))
    r = c.getresponse()
    whole["status"], whole["body"] = r.status, r.read()
th = threading.Thread(target=whole_request)
th.start()

def in_engine():
    """Requests the engine holds (running + waiting), from /metrics."""
    c = conn()
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    n = 0
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            n += int(float(line.split()[-1]))
    return n

# The whole request must be in the engine before SIGTERM (a thread that has not sent it yet
# would rightly get 503): wait until the server counts it.
t_start, polls, seen = time.time(), 0, 0
while time.time() - t_start < 30 and "status" not in whole:
    polls += 1
    seen = in_engine()
    if seen >= 1:
        break
    time.sleep(0.01)
check(seen >= 1, "the whole request reached the engine before SIGTERM (%d polls in %.2f s, "
      "whole request %s)" % (polls, time.time() - t_start,
                             "answered %s" % whole.get("status") if "status" in whole else "pending"))

s = conn()
s.request("POST", "/v1/completions", json.dumps(
    {"prompt": "Once", "max_tokens": 2000, "ignore_eos": True, "temperature": 0, "stream": True,
     "stream_options": {"include_usage": True}}))
r = s.getresponse()
check(r.status == 200, "stream status %d" % r.status)
lines = [r.readline()]                      # the first chunk: the stream is in flight
os.kill(pid, signal.SIGTERM)
for _ in range(500):                           # the server prints this just before draining
    if "received SIGTERM" in open(server_out).read():
        break
    time.sleep(0.01)
time.sleep(0.05)

if mode == "grace":
    keep.request("POST", "/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 4}))
    p = keep.getresponse()
    body = p.read()
    check(p.status == 503, "draining: a new request gets 503 (got %d %r)" % (p.status, body[:200]))
    check(p.getheader("Retry-After") is not None, "draining: 503 has Retry-After")
    check(b'"error"' in body, "draining: 503 has an error body")

while True:                                    # read the stream to its end
    l = r.readline()
    if not l:
        break
    lines.append(l)
raw = b"".join(lines).decode()
events = [e[6:] for e in raw.split("\n\n") if e.startswith("data: ")]
check(events and events[-1] == "[DONE]", "stream ends with [DONE]: %r" % raw[-200:])
chunks = [json.loads(e) for e in events if e != "[DONE]"]
check(all("error" not in c for c in chunks), "stream has no error event")
finish = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
usage = [c["usage"] for c in chunks if c.get("usage")]
ntok = usage[-1]["completion_tokens"] if usage else -1
th.join(120)
if mode == "grace":
    check(finish[-1:] == ["length"], "stream finished by length (%s)" % finish[-1:])
    check(ntok == 2000, "stream got all 2000 tokens (usage says %d)" % ntok)
    check(whole.get("status") == 200, "whole request: 200 (got %s)" % whole.get("status"))
    if whole.get("status") == 200:
        j = json.loads(whole["body"])
        check(j["usage"]["completion_tokens"] == 8000 and
              [c["finish_reason"] for c in j["choices"]] == ["length"] * 4,
              "whole request got all 4 x 2000 tokens: %s" % j["usage"])
else:
    check(finish[-1:] == ["abort"], "stream aborted (finish %s)" % finish[-1:])
    check(0 <= ntok < 2000, "stream stopped early (%d tokens)" % ntok)
    st = whole.get("status")
    if st == 200:
        j = json.loads(whole["body"])
        check("abort" in [c["finish_reason"] for c in j["choices"]] and
              j["usage"]["completion_tokens"] < 8000, "whole request aborted: %s %s" % ([c["finish_reason"] for c in j["choices"]], j["usage"]))
    else:
        check(st is not None and st >= 500, "whole request: aborted (got %s)" % st)
print("OK" if not fails else "BAD")
