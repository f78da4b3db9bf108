#!/usr/bin/env python3
"""Soak driver for test_soak.sh: for a bounded time, concurrent clients send a seeded random mix
of requests (completions and chat, streaming or not, n/best_of, beam search, stop strings,
shared prefixes, early-closed streams, mid-request disconnects, invalid bodies) and check that
every one ends: a complete answer (finish_reason set, [DONE] for streams), or a 400 for an invalid
body. A 503 is a violation too: T clients have at most T requests in flight, far below the
server's queue bound (test_soak.sh: 8 under --max-waiting 64), so a refusal means the server lost
track of its queue. At least --min-answered (default 0.9) of the valid requests that wait for an
answer (all but the mid-request disconnects) must be answered (complete, or streamed until the
client closed). Prints figures and "OK" or "FAILED". Standard library only.

With --faults (the fault-injection build, tests/fault) a request may also end with an error the
server gives for a failed allocation: a 500/503 with an OpenAI error body, or a stream whose last
event before [DONE] is {"error": ...}; anything else still fails the run, and so does a 503
queue_full.

usage: soak_client.py HOST PORT [--seconds S] [--threads T] [--seed N] [--faults]
                      [--min-answered F]"""
import argparse, http.client, json, random, socket, sys, threading, time
from collections import Counter

ap = argparse.ArgumentParser()
ap.add_argument("host")
ap.add_argument("port", type=int)
ap.add_argument("--seconds", type=float, default=60.0)
ap.add_argument("--threads", type=int, default=8)
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--faults", action="store_true", help="accept error answers from failed allocations")
ap.add_argument("--min-answered", type=float, default=0.9,
                help="least fraction of the valid requests (disconnects aside) that must be answered")
a = ap.parse_args()

TIMEOUT = 30  # a socket timeout (a request here takes well under 1 s): a hung connection is a failure, never a hang of the test
PREFIXES = ["Once upon a time, there was a little boy named Tom. He liked to play with his red ball in the big green park near his house every day.",
            "One day, a little girl named Sue went to the shop with her mom. They wanted to buy some bread and milk for breakfast.",
            "The cat sat on the mat. The dog ran in the sun. The bird sang a happy song in the tall tree."]
TAILS = [" Then", " One day,", " He said,", " She was sad.", " The end", " They"]

lock = threading.Lock()
sent, done, statuses, errors = Counter(), Counter(), Counter(), []

def fail(kind, msg):
    with lock:
        errors.append(f"{kind}: {msg}")

def prompt(r):
    return r.choice(PREFIXES) + r.choice(TAILS) if r.random() < 0.6 else r.choice(["Once upon a time", "Lily", "The sun"])

def make(r):
    """Returns (kind, path, body, mode) where mode is full|stream|cancel|disconnect|invalid."""
    k = r.randrange(100)
    mt = r.randint(4, 40)
    base = {"max_tokens": mt, "temperature": r.choice([0, 0.7, 1.0]), "seed": r.randrange(1000)}
    if k < 8:
        bad = r.choice([b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": ', b'{"prompt": "x", "n": 0}',
                        b'{"prompt": "x", "temperature": 9}', b'{"messages": []}'])
        path = "/v1/chat/completions" if b"messages" in bad else "/v1/completions"
        return "invalid", path, bad, "invalid"
    if k < 16:
        return "cancel", "/v1/completions", dict(base, prompt=prompt(r), max_tokens=60, stream=True), "cancel"
    if k < 22:
        return "disconnect", "/v1/completions", dict(base, prompt=prompt(r), max_tokens=60), "disconnect"
    if k < 30:
        return "beam", "/v1/completions", dict(prompt=prompt(r), max_tokens=r.randint(4, 16), temperature=0,
                                               use_beam_search=True, best_of=r.choice([2, 3]), n=r.choice([1, 2])), "full"
    if k < 38:
        return "best_of", "/v1/completions", dict(base, prompt=prompt(r), n=r.choice([1, 2]), best_of=3, temperature=0.8), "full"
    if k < 46:
        return "n", "/v1/completions", dict(base, prompt=prompt(r), n=r.choice([2, 3]), temperature=0.8), r.choice(["full", "stream"])
    if k < 54:
        return "stop", "/v1/completions", dict(base, prompt=prompt(r), stop=r.choice([["Lily"], [".", "!"], ["the", "and"]])), r.choice(["full", "stream"])
    if k < 75:
        body = dict(base, messages=[{"role": "user", "content": prompt(r)}])
        return "chat", "/v1/chat/completions", body, r.choice(["full", "stream", "stream"])
    return "completion", "/v1/completions", dict(base, prompt=prompt(r)), r.choice(["full", "stream"])

def one(r, kind, path, body, mode):
    raw = body if isinstance(body, bytes) else json.dumps(dict(body, stream=mode in ("stream", "cancel")) if mode != "disconnect" else body).encode()
    c = http.client.HTTPConnection(a.host, a.port, timeout=TIMEOUT)
    try:
        c.request("POST", path, raw, {"Content-Type": "application/json"})
        if mode == "disconnect":  # gone before the answer: the server must drop the request
            time.sleep(r.uniform(0, 0.3))
            c.sock.shutdown(socket.SHUT_RDWR)
            return "disconnected"
        resp = c.getresponse()
        st = resp.status
        with lock:
            statuses[st] += 1
        if a.faults and st in (500, 503):
            data = resp.read()
            try:
                err = json.loads(data)["error"]
                msg, code = err["message"], err.get("code")
            except Exception:
                msg = code = None
            if not msg:
                fail(kind, f"status {st} without an error body: {data[:200]!r}")
            elif code == "queue_full":  # a failed allocation is no reason for a full queue
                fail(kind, f"status {st} queue_full with at most {a.threads} requests in flight: {data[:200]!r}")
            return f"error {st}"
        if mode == "invalid":
            data = resp.read()
            if st != 400 or "error" not in json.loads(data):
                fail(kind, f"status {st} body {data[:200]!r}")
            return "400"
        if st != 200:
            fail(kind, f"status {st} body {resp.read()[:300]!r} for {raw[:200]!r}")
            return "err"
        if mode == "full":
            j = json.loads(resp.read())
            want = body.get("n", 1)
            ch = j["choices"]
            if len(ch) != want or any(x.get("finish_reason") not in ("stop", "length") for x in ch):
                fail(kind, f"choices {ch!r}")
            return "ok"
        # streaming: read SSE lines; cancel closes after a few events
        finished, events, limit = set(), 0, (r.randint(1, 3) if mode == "cancel" else None)
        while True:
            line = resp.fp.readline()
            if not line:
                fail(kind, f"stream ended without [DONE] after {events} events")
                return "err"
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                break
            events += 1
            ev = json.loads(line[6:])
            if a.faults and "error" in ev:
                if not ev["error"].get("message"):
                    fail(kind, f"stream error event without a message: {line[:200]!r}")
                raw = resp.fp.readline()  # skip blank lines and chunk-size lines; b"" is the end
                while raw and not raw.startswith(b"data: "):
                    raw = resp.fp.readline()
                nxt = raw.strip()
                if nxt != b"data: [DONE]":
                    fail(kind, f"stream error event not followed by [DONE]: {nxt[:100]!r}")
                return "stream error"
            for x in ev.get("choices", []):
                if x.get("finish_reason"):
                    finished.add(x["index"])
            if limit is not None and events >= limit:
                return "cancelled"
        if len(finished) != body.get("n", 1):
            fail(kind, f"stream finished {sorted(finished)} of n={body.get('n', 1)}")
        return "ok"
    except (socket.timeout, TimeoutError) as e:
        fail(kind, f"timeout ({e}) for {raw[:200]!r}")
        return "timeout"
    except Exception as e:
        fail(kind, f"{type(e).__name__}: {e} for {raw[:200]!r}")
        return "exc"
    finally:
        c.close()

def worker(i, deadline):
    r = random.Random(a.seed * 1000 + i)
    while time.time() < deadline:
        kind, path, body, mode = make(r)
        with lock:
            sent[f"{kind}/{mode}"] += 1
        res = one(r, kind, path, body, mode)
        with lock:
            done[res] += 1

deadline = time.time() + a.seconds
ts = [threading.Thread(target=worker, args=(i, deadline)) for i in range(a.threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("sent by kind:", dict(sorted(sent.items())))
print("ended:", dict(sorted(done.items())))
print("status:", dict(sorted(statuses.items())))
print("violations:", len(errors))
for e in errors[:20]:
    print("  ", e)
# The valid requests that wait for an answer: all but the invalid bodies and the disconnects.
expect = sum(n for k, n in sent.items() if not k.endswith(("/invalid", "/disconnect")))
answered = done["ok"] + done["cancelled"]
share = answered / expect if expect else 0.0
print(f"answered: {answered} of {expect} valid requests ({100 * share:.1f} %, at least "
      f"{100 * a.min_answered:.0f} % wanted)")
short = share < a.min_answered
if short:
    print(f"   too few answered: {answered} of {expect}")
print("OK" if not errors and not short and expect > 0 else "FAILED")
