#!/usr/bin/env python3
"""End-to-end test of `qwenrt serve`: starts the real server on a free loopback port with a fixture model and
drives it over HTTP (Python stdlib; curl and the `openai` package too when present).

usage: test_server.py QWENRT_BINARY TEST_DATA_DIR SCRATCH_DIR [full|small]

The fixture is made here: `qwenrt synth --preset tiny --mtp` (vocab 2048) plus tests/data/tokenizer/tok-small.json
with 15 filler special tokens so the tokenizer covers every id the model can emit. Nothing is committed.
`small` (the AddressSanitizer build) sends fewer generating requests in the load test."""
import json, os, shutil, signal, socket, subprocess, sys, threading, time, http.client

QWENRT, DATA, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
SMALL = len(sys.argv) > 4 and sys.argv[4] == "small"
FX = os.path.join(SCRATCH, "fx")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def make_fixture():
    if os.path.exists(os.path.join(FX, "tokenizer.json")):
        return
    shutil.rmtree(FX, ignore_errors=True)
    os.makedirs(SCRATCH, exist_ok=True)
    subprocess.run([QWENRT, "synth", "--preset", "tiny", "--format", "bf16", "--mtp", "--threads", "1", FX],
                   check=True, stdout=subprocess.DEVNULL)
    tok = json.load(open(os.path.join(DATA, "tokenizer", "tok-small.json")))
    for i in range(2033, 2048):
        tok["added_tokens"].append({"id": i, "content": f"<|filler_{i}|>", "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    json.dump(tok, open(os.path.join(FX, "tokenizer.json"), "w"))


class Server:
    def __init__(self, *extra):
        self.log = open(os.path.join(SCRATCH, "server.log"), "w+")
        self.p = subprocess.Popen([QWENRT, "serve", "-m", FX, "--port", "0", "--threads", "1", "--device", "cpu",
                                   *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.log.write(line)
            if "listening on http://" in line:
                self.port = int(line.rsplit(":", 1)[1])
                break
        if not self.port:
            raise SystemExit("the server did not start; log: " + open(self.log.name).read())
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.write(line)
            self.log.flush()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = "hung"
        return rc


def request(port, method, path, body=None, headers=None, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, raw


def post(port, path, body, **kw):
    status, raw = request(port, "POST", path, body, **kw)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def stream(port, path, body):
    """The SSE events of a streamed request, parsed (the final [DONE] as the string "[DONE]")."""
    status, raw = request(port, "POST", path, dict(body, stream=True))
    events = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[6:]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return status, events


def detok(ids):
    if not ids:
        return ""
    out = subprocess.run([QWENRT, "detokenize", "-m", FX, ",".join(map(str, ids))], check=True,
                         capture_output=True, text=True).stdout
    return out[:-1]  # the trailing newline the command adds


STOP_IDS = {2002, 2000, 2047}  # <|im_end|>, <|endoftext|>, the model's eos


def reference_tokens(args):
    """Greedy tokens of `qwenrt generate` (plain decoding), cut at the first stop token as the server does."""
    out = subprocess.run([QWENRT, "generate", "-m", FX, "--json", "--spec-k", "0", "--threads", "1", "--device", "cpu",
                          "--no-eos", *args], check=True, capture_output=True, text=True).stdout
    toks = json.loads(out.strip().splitlines()[-1])["tokens"]
    for i, t in enumerate(toks):
        if t in STOP_IDS:
            return toks[:i], True
    return toks, False


def error_ok(status, body, want_status, what):
    check(status == want_status, f"{what}: status {status}, want {want_status}: {body!r:.300}")
    check(isinstance(body, dict) and isinstance(body.get("error"), dict)
          and all(k in body["error"] for k in ("message", "type", "code")), f"{what}: JSON error body: {body!r:.300}")


def test_basics(port):
    s, raw = request(port, "GET", "/health")
    check(s == 200 and json.loads(raw)["status"] == "ok", "/health")
    s, raw = request(port, "GET", "/v1/models")
    check(s == 200 and json.loads(raw)["data"][0]["id"] == "fx", f"/v1/models: {raw!r}")


def test_parity(port):
    """Greedy output through the server equals `qwenrt generate` (the server speculates with --spec-k 2 on
    fresh sessions; greedy speculative output must equal plain decoding)."""
    n = 8
    toks, stopped = reference_tokens(["-p", "The quick brown fox", "-n", str(n)])
    want = detok(toks)
    s, r = post(port, "/v1/completions", {"prompt": "The quick brown fox", "max_tokens": n, "temperature": 0})
    check(s == 200 and r["choices"][0]["text"] == want, f"completion parity: {r!r:.400} vs {want!r}")
    check(r["usage"]["completion_tokens"] == len(toks) + (1 if stopped else 0), f"completion_tokens {r['usage']}")
    check(r["choices"][0]["finish_reason"] == ("stop" if stopped else "length"), "finish_reason")
    s, ev = stream(port, "/v1/completions", {"prompt": "The quick brown fox", "max_tokens": n, "temperature": 0})
    text = "".join(e["choices"][0]["text"] for e in ev if isinstance(e, dict) and e.get("choices"))
    check(s == 200 and text == want and ev[-1] == "[DONE]", f"streamed completion parity: {text!r} vs {want!r}")

    toks, _ = reference_tokens(["-p", "Hello there", "--chat", "--no-think", "-n", str(n)])
    want = detok(toks).lstrip("\r\n")
    body = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": n, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False}}
    s, r = post(port, "/v1/chat/completions", body)
    msg = r["choices"][0]["message"] if s == 200 else {}
    check(s == 200 and msg.get("content") == want and "reasoning_content" not in msg,
          f"chat parity (thinking off): {r!r:.400} vs {want!r}")
    s, ev = stream(port, "/v1/chat/completions", dict(body, stream_options={"include_usage": True}))
    chunks = [e for e in ev if isinstance(e, dict)]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    check(text == want, f"streamed chat parity: {text!r} vs {want!r}")
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == r["usage"]["completion_tokens"],
          f"usage chunk: {chunks[-1]!r:.300}")

    toks, _ = reference_tokens(["-p", "Hello there", "--chat", "-n", str(n)])
    want = detok(toks).strip("\r\n")
    s, r = post(port, "/v1/chat/completions", dict(body, chat_template_kwargs={"enable_thinking": True}))
    msg = r["choices"][0]["message"]
    if "</think>" not in detok(toks):
        check(msg.get("reasoning_content") == want and msg["content"] == "",
              f"thinking on: the unfinished reasoning is reasoning_content: {msg!r:.300} vs {want!r}")


def test_stop(port):
    body = {"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0}
    _, r = post(port, "/v1/completions", body)
    full = r["choices"][0]["text"]
    if len(full) < 6:
        return check(False, f"too little text to test stop strings: {full!r}")
    stop = full[len(full) // 2:len(full) // 2 + 2]
    want = full[:full.find(stop)]
    for stops in (stop, [stop, "zzzz-not-there"]):
        _, r = post(port, "/v1/completions", dict(body, stop=stops))
        check(r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop",
              f"stop {stops!r}: {r['choices'][0]!r} vs {want!r}")
    _, ev = stream(port, "/v1/completions", dict(body, stop=stop))
    text = "".join(e["choices"][0]["text"] for e in ev if isinstance(e, dict) and e.get("choices"))
    check(text == want, f"streamed stop: {text!r} vs {want!r}")


def test_prefix_reuse(port):
    """A prompt that extends the previous request's tokens continues from its state: same output as a cold
    prefill, less prefill time. max_tokens 1 makes the session hold exactly the prompt."""
    prompt = [(i * 37 + 11) % 1990 for i in range(120 if SMALL else 240)]
    more = [(i * 53 + 7) % 1990 for i in range(8)]
    post(port, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1})  # a different conversation
    s, cold = post(port, "/v1/completions", {"prompt": prompt + more, "max_tokens": 6, "temperature": 0})
    check(s == 200 and cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"cold: {cold!r:.300}")
    post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    s, warm = post(port, "/v1/completions", {"prompt": prompt + more, "max_tokens": 6, "temperature": 0})
    check(s == 200 and warm["usage"]["prompt_tokens_details"]["cached_tokens"] == len(prompt),
          f"warm request reuses {len(prompt)} tokens: {warm.get('usage')!r}")
    check(warm["choices"][0]["text"] == cold["choices"][0]["text"], "reused state gives the same greedy output")
    c, w = cold["timings"]["prefill_ms"], warm["timings"]["prefill_ms"]
    print(f"prefix reuse: prefill of {len(prompt) + len(more)} tokens {c:.1f} ms cold, {w:.1f} ms reusing "
          f"{len(prompt)} tokens; saved {c - w:.1f} ms ({c / max(w, 1e-3):.1f}x)", flush=True)
    check(w < c, "reusing the prefix prefills faster")
    # a prompt that diverges inside the kept tokens starts over
    s, r = post(port, "/v1/completions", {"prompt": prompt[:100] + [1] + more, "max_tokens": 1})
    check(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "a diverging prompt does not reuse")


def test_bad_requests(port):
    chat = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    for body, what in [(b"{not json", "malformed JSON"), (b"", "empty body"), (b"[1,2]", "a list body"),
                       (b'{"messages": "\xff"}', "invalid UTF-8"),
                       (json.dumps({"messages": msgs, "max_tokens": "ten"}).encode(), "max_tokens a string"),
                       (json.dumps({"messages": msgs, "temperature": -2}).encode(), "temperature < 0"),
                       (json.dumps({"messages": msgs, "stop": 3}).encode(), "stop a number"),
                       (json.dumps({"messages": 5}).encode(), "messages a number"),
                       (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), "unknown role"),
                       (json.dumps({"messages": msgs, "stream": "yes"}).encode(), "stream a string")]:
        s, r = post(port, chat, body)
        error_ok(s, r, 400, what)
    s, r = post(port, "/v1/completions", {"prompt": [1, 99999]})
    error_ok(s, r, 400, "token id past the vocabulary")
    s, r = post(port, "/v1/completions", {"prompt": [1] * 5000})
    error_ok(s, r, 400, "prompt longer than the context")
    s, r = post(port, chat, {"messages": msgs, "max_tokens": 2, "unknown_field": {"x": 1}, "presence_penalty": 1})
    check(s == 200, f"unknown fields are ignored: {s} {r!r:.200}")
    s, raw = request(port, "GET", "/v1/nothing")
    error_ok(s, json.loads(raw), 404, "unknown route")
    s, raw = request(port, "GET", chat)
    error_ok(s, json.loads(raw), 405, "GET on a POST route")
    s, raw = request(port, "POST", "/health", b"{}")
    error_ok(s, json.loads(raw), 405, "POST on a GET route")
    big = b'{"messages": [{"role": "user", "content": "' + b"a" * 300000 + b'"}]}'
    s, raw = request(port, "POST", chat, big)
    error_ok(s, json.loads(raw), 413, "body over --max-body (Content-Length)")
    # the same without a Content-Length (chunked): refused after reading
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", chat, body=iter([big[:100000], big[100000:]]), encode_chunked=True,
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    r = c.getresponse()
    error_ok(r.status, json.loads(r.read()), 413, "chunked body over --max-body")
    c.close()


def test_disconnect(port):
    """A client that goes away mid-stream: generation stops, the next request works."""
    body = json.dumps({"prompt": "Tell me a long story", "max_tokens": 400, "stream": True, "temperature": 0})
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(4096)
    sock.close()
    t0 = time.time()
    s, r = post(port, "/v1/completions", {"prompt": "hello", "max_tokens": 3, "temperature": 0})
    check(s == 200 and r["usage"]["completion_tokens"] == 3, f"request after a disconnect: {s} {r!r:.200}")
    check(time.time() - t0 < 60, "the abandoned generation did not run to its 400 tokens first")
    _, raw = request(port, "GET", "/metrics")
    cancelled = [l for l in raw.decode().splitlines() if l.startswith("qwenrt_generations_cancelled_total")]
    check(cancelled and int(cancelled[0].split()[-1]) >= 1, f"metrics count the cancelled generation: {cancelled}")


def test_queue_full(port, queue):
    """More concurrent requests than 1 running + --queue waiting: the rest get 503 with a JSON error."""
    results = []
    lock = threading.Lock()

    def one(i):
        s, r = post(port, "/v1/completions", {"prompt": f"request {i}", "max_tokens": 20, "temperature": 0})
        with lock:
            results.append((s, r))
    threads = [threading.Thread(target=one, args=(i,)) for i in range(queue + 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(s for s, _ in results)
    check(codes.count(503) >= 1 and codes.count(200) >= queue, f"queue full → 503: {codes}")
    for s, r in results:
        if s == 503:
            error_ok(s, r, 503, "queue full")


def test_load(port):
    """A few hundred requests from 8 threads, some malformed, some streamed: every answer is a known status."""
    generating = 12 if SMALL else 60
    total = 200 if SMALL else 300
    statuses = []
    lock = threading.Lock()
    kinds = []
    for i in range(total):
        if i % (total // generating) == 0:
            kinds.append(("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": f"q{i}"}],
                                                            "max_tokens": 2, "stream": i % 2 == 0}))
        else:
            kinds.append([("POST", "/v1/chat/completions", b'{"messages": [}'),
                          ("GET", "/health", None), ("GET", "/metrics", None), ("DELETE", "/v1/models", None),
                          ("POST", "/v1/completions", {"prompt": 12}), ("GET", "/nope", None),
                          ("POST", "/v1/completions", {"prompt": "x", "max_tokens": -1})][i % 7])

    def worker(k):
        for i in range(k, total, 8):
            m, path, body = kinds[i]
            try:
                s, _ = request(port, m, path, body, timeout=300)
            except Exception as e:  # a connection error is a failure too
                s = repr(e)
            with lock:
                statuses.append(s)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = {s: statuses.count(s) for s in set(statuses)}
    print(f"load: {total} requests in {time.time() - t0:.1f} s: {counts}", flush=True)
    check(set(counts) <= {200, 400, 404, 405, 503} and len(statuses) == total, f"load statuses {counts}")


def test_metrics(port):
    _, raw = request(port, "GET", "/metrics")
    text = raw.decode()
    for name in ("qwenrt_requests_total{route=\"/v1/chat/completions\",status=\"200\"}",
                 "qwenrt_requests_total{route=\"/v1/chat/completions\",status=\"400\"}",
                 "qwenrt_generated_tokens_total", "qwenrt_ttft_seconds_bucket", "qwenrt_decode_tokens_per_second_count",
                 "qwenrt_spec_cycles_total", "qwenrt_prompt_tokens_reused_total", "qwenrt_queue_depth"):
        check(name in text, f"/metrics has {name}")
    cycles = [l for l in text.splitlines() if l.startswith("qwenrt_spec_cycles_total")]
    check(cycles and int(cycles[0].split()[-1]) > 0, "speculative cycles are counted")


def test_curl(port):
    if not shutil.which("curl"):
        return print("curl not found: curl checks skipped")
    out = subprocess.run(["curl", "-sN", f"http://127.0.0.1:{port}/v1/chat/completions", "-d",
                          json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                      "stream": True})], capture_output=True, text=True, timeout=120).stdout
    check(out.startswith("data: {") and out.endswith("data: [DONE]\n\n"), f"curl stream: {out!r:.300}")


def test_openai_client(port):
    try:
        import openai
    except ImportError:
        return print("the openai package is not installed: client checks skipped")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    msgs = [{"role": "user", "content": "Hello there"}]
    extra = {"chat_template_kwargs": {"enable_thinking": False}}
    r = client.chat.completions.create(model="fx", messages=msgs, max_tokens=8, temperature=0, extra_body=extra)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="fx", messages=msgs, max_tokens=8, temperature=0, stream=True, extra_body=extra) if c.choices)
    check(r.choices[0].message.content == text, f"openai client: {r.choices[0].message.content!r} vs {text!r}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "openai usage")
    c = client.completions.create(model="fx", prompt="The quick brown fox", max_tokens=4, temperature=0)
    check(isinstance(c.choices[0].text, str), "openai completions")
    try:
        client.chat.completions.create(model="fx", messages=msgs, max_tokens="x")
        check(False, "openai client: a bad request raises")
    except openai.BadRequestError:
        pass


def main():
    make_fixture()
    queue = 3
    srv = Server("--ctx", "1024", "--queue", str(queue), "--max-body", "200000", "--spec-k", "2")
    try:
        for t in (test_basics, test_parity, test_stop, test_prefix_reuse, test_bad_requests, test_disconnect,
                  test_curl, test_openai_client, test_load, test_metrics):
            t0 = time.time()
            t(srv.port)
            print(f"{t.__name__}: {time.time() - t0:.1f} s", flush=True)
        test_queue_full(srv.port, queue)
    finally:
        rc = srv.stop()
    check(rc == 0, f"the server exits 0 on SIGTERM (AddressSanitizer reports leaks as non-zero): {rc}; log in "
          f"{srv.log.name}")
    print(f"server test: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
