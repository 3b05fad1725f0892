"""The official `openai` Python client against `qwenrt serve` on a tiny synthetic model: what a user's code does.

    python tests/openai_client.py build/bin/qwenrt

Needs the `openai` package (scripts/test.sh installs it into a virtual environment for this test only; qwenrt
itself never needs Python). Exit status: the number of failed checks, 77 when `openai` is missing.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import openai
except ImportError:
    print("openai_client: the openai package is not installed; skipped")
    sys.exit(77)

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what)
    failures += 0 if ok else 1


def expect_error(kind, what, call):
    try:
        call()
    except kind:
        check(True, what)
    except Exception as e:  # the wrong error is a failure too
        check(False, f"{what}: {type(e).__name__}: {e}")
    else:
        check(False, f"{what}: no error")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(qwenrt, model, port, log):
    srv = subprocess.Popen([qwenrt, "serve", "-m", model, "--port", str(port), "--ctx", "1024", "--alias", "tiny"],
                           stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return srv
        except OSError:
            if srv.poll() is not None:
                break
            time.sleep(0.1)
    srv.kill()
    sys.exit(f"openai_client: qwenrt serve did not come up (log: {log.name})")


def run(c, model_id):
    greedy = dict(model=model_id, temperature=0, max_tokens=8)
    msgs = [{"role": "user", "content": "Say hello."}]

    def said(m):  # the answer and the thinking (reasoning_content): random weights rarely close <think>
        return (m.content or "") + "|" + ((m.model_extra or {}).get("reasoning_content") or "")

    r = c.chat.completions.create(messages=msgs, **greedy)
    text = said(r.choices[0].message)
    check(len(text) > 1 and r.choices[0].finish_reason in ("stop", "length"),
          f"chat: said {text!r}, finish_reason {r.choices[0].finish_reason}")
    check(r.usage is not None and 0 < r.usage.completion_tokens <= 8, f"chat: usage {r.usage}")

    content, thinking = "", ""
    for ch in c.chat.completions.create(messages=msgs, stream=True, **greedy):
        if ch.choices:
            content += ch.choices[0].delta.content or ""
            thinking += (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
    check(content + "|" + thinking == text, "chat streamed: the deltas add up to the same greedy answer and thinking")

    r = c.completions.create(prompt="Hello", **greedy)
    ctext = r.choices[0].text
    check(isinstance(ctext, str) and len(ctext) > 0, f"completions: text {ctext!r}")
    parts = [ch.choices[0].text for ch in c.completions.create(prompt="Hello", stream=True, **greedy) if ch.choices]
    check("".join(parts) == ctext, "completions streamed: the chunks add up to the same greedy text")

    r = c.chat.completions.create(messages=msgs, logprobs=True, top_logprobs=2, **greedy)
    lp = r.choices[0].logprobs
    ok = lp is not None and len(lp.content) == r.usage.completion_tokens and \
        all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in lp.content)
    check(ok, "chat logprobs: one entry per token, logprob <= 0, two top_logprobs each")
    if ok:  # greedy: the chosen token is the most likely one
        check(all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-4 for t in lp.content),
              "chat logprobs: each greedy token is its top_logprobs[0]")

    r = c.completions.create(prompt="Hello", logprobs=2, **greedy)
    lp = r.choices[0].logprobs
    check(lp is not None and len(lp.tokens) == len(lp.token_logprobs) == r.usage.completion_tokens,
          "completions logprobs: tokens and token_logprobs per generated token")

    r = c.chat.completions.create(messages=msgs, **dict(greedy, model="tiny"))
    check(said(r.choices[0].message) == text, "--alias: the alias serves the same model")
    expect_error(openai.NotFoundError, "an unknown model name is 404",
                 lambda: c.chat.completions.create(messages=msgs, **dict(greedy, model="no-such-model")))
    expect_error(openai.BadRequestError, "response_format json_object is a 400 (not supported)",
                 lambda: c.chat.completions.create(messages=msgs, response_format={"type": "json_object"}, **greedy))
    tool = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    expect_error(openai.BadRequestError, "a tool without a name is a 400",
                 lambda: c.chat.completions.create(messages=msgs, tools=[{"type": "function", "function": {}}],
                                                   **greedy))
    expect_error(openai.BadRequestError, "tool_choice naming a missing function is a 400",
                 lambda: c.chat.completions.create(messages=msgs, tools=[tool],
                                                   tool_choice={"type": "function", "function": {"name": "nope"}},
                                                   **greedy))
    expect_error(openai.BadRequestError, "top_logprobs 21 is a 400",
                 lambda: c.chat.completions.create(messages=msgs, logprobs=True, top_logprobs=21, **greedy))

    r = c.chat.completions.create(messages=msgs, tools=[tool],
                                  tool_choice={"type": "function", "function": {"name": "get_time"}},
                                  **dict(greedy, max_tokens=24))
    calls = r.choices[0].message.tool_calls or []
    check(len(calls) >= 1 and calls[0].function.name == "get_time",
          f"a named tool_choice comes back as a call of that tool ({calls})")


def main():
    qwenrt = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="qrt-openai-")
    try:
        model = os.path.join(tmp, "tiny")
        subprocess.run([qwenrt, "synth", "--preset", "tiny", "--format", "bf16", "--mtp", model], check=True,
                       stdout=subprocess.DEVNULL)
        port = free_port()
        with open(os.path.join(tmp, "server.log"), "w") as log:
            srv = start(qwenrt, model, port, log)
            try:
                c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                                  timeout=120)
                ids = [m.id for m in c.models.list().data]
                check("tiny" in ids and len(ids) >= 2, f"/v1/models lists the id and the alias: {ids}")
                run(c, ids[0])
            finally:
                srv.terminate()
                check(srv.wait(timeout=30) == 0, "the server exits 0 on SIGTERM")
        if failures:
            print(open(os.path.join(tmp, "server.log")).read()[-4000:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"openai_client: {failures} failed" if failures else "openai_client: all passed")
    sys.exit(min(failures, 76))


main()
