#!/usr/bin/env python3
"""tools/test_openai.py: the official `openai` Python client against `pagechat serve`.

    make test-openai        (installs openai from PyPI into build/venv-openai first)
    python3 tools/test_openai.py --bin build/pagechat --model MODEL.gguf [--template-model M.gguf]
                                 [--cancel-model M.gguf]

Starts the server on a free port with an API key and checks, through the client:
the model list; greedy chat and text completions equal to `pagechat generate` on
the same prompt; streaming equal to whole answers, with the usage chunk; n = 2;
stop strings; seeds (the same seed, the same answer); usage figures (prompt
tokens as `pagechat tokenize` counts them, cached tokens on a repeated prefix);
ignore_eos and a stream closed mid-way (on --cancel-model, random weights
that end answers now and then: the request is cancelled and its blocks
freed, seen in /metrics); the errors the client raises (unknown model, context, wrong key).
With --template-model, a chat on a model with a chat template equals a text
completion of the ids `pagechat template` renders. Prints one line per check
and "N passed, N failed"; exits 1 on any failure.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import openai

KEY = "test-key"
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print("ok    " + what)
    else:
        failed += 1
        print("FAIL  " + what)


class Server:
    """`pagechat serve` on a free port, stopped with SIGTERM."""

    def __init__(self, binary, model, extra=()):
        # the key through the environment (a flag's key would be visible in ps)
        self.p = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", *extra],
                                  stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PAGECHAT_DEVICE=os.environ.get("PAGECHAT_DEVICE", "cpu"),
                                           PAGECHAT_API_KEY=KEY))
        seen = ""
        for _ in range(8):  # notes (no GPU, ...) may come before the start line
            line = self.p.stderr.readline()
            seen += line
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if m or not line:
                break
        if not m:
            self.p.kill()
            raise SystemExit("pagechat serve did not start: " + seen)
        self.port = int(m.group(1))
        self.model = re.search(r"serving (\S+)", line).group(1)
        self.base = "http://127.0.0.1:%d" % self.port

    def client(self, **kw):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=kw.pop("api_key", KEY), max_retries=0, **kw)

    def metric(self, name):
        with urllib.request.urlopen(self.base + "/metrics") as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=30)
        check(rc == 0, "the server exits 0 on SIGTERM")


def generate(binary, model, prompt, n):
    out = subprocess.run([binary, "generate", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0"],
                         capture_output=True, text=True, check=True,
                         env=dict(os.environ, PAGECHAT_DEVICE=os.environ.get("PAGECHAT_DEVICE", "cpu")))
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


def n_tokens(binary, model, text):
    out = subprocess.run([binary, "tokenize", "-m", model, text], capture_output=True, text=True, check=True)
    return len(out.stdout.split())


def test_greedy(s, c, args):
    prompt = "Once upon a time"
    ref = generate(args.bin, args.model, prompt, 40)
    r = c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": prompt}],
                                  max_tokens=40, temperature=0)
    check(r.choices[0].message.content == ref, "greedy chat equals pagechat generate: %r" % ref[:40])
    check(r.object == "chat.completion" and r.choices[0].finish_reason in ("length", "stop"),
          "chat object and finish_reason")
    check(r.usage.prompt_tokens == n_tokens(args.bin, args.model, prompt), "usage.prompt_tokens as tokenize counts")
    check(r.usage.completion_tokens + r.usage.prompt_tokens == r.usage.total_tokens, "usage adds up")
    t = c.completions.create(model=s.model, prompt=prompt, max_tokens=40, temperature=0)
    check(t.choices[0].text == ref, "greedy text completion equals pagechat generate")
    return ref


def test_stream(s, c, ref):
    chunks = list(c.chat.completions.create(
        model=s.model, messages=[{"role": "user", "content": "Once upon a time"}], max_tokens=40,
        temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == ref, "streamed chat equals the whole answer")
    fins = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(len(fins) == 1, "one finish_reason in the stream")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40 and not chunks[-1].choices,
          "the last chunk carries the usage")
    pieces = list(c.completions.create(model=s.model, prompt="Once upon a time", max_tokens=40, temperature=0,
                                       stream=True))
    check("".join(p.choices[0].text for p in pieces if p.choices) == ref, "streamed text completion")


def test_n_seed_stop(s, c, ref):
    r = c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": "The dog"}], n=2,
                                  max_tokens=24, temperature=1.0, seed=7)
    check(len(r.choices) == 2 and {ch.index for ch in r.choices} == {0, 1}, "n = 2 gives two choices")
    check(2 <= r.usage.completion_tokens <= 48 and r.choices[0].message.content != r.choices[1].message.content,
          "the two choices differ; usage counts both")
    a = [c.completions.create(model=s.model, prompt="The dog", max_tokens=24, temperature=1.0, seed=1234)
         .choices[0].text for _ in range(2)]
    b = c.completions.create(model=s.model, prompt="The dog", max_tokens=24, temperature=1.0,
                             seed=1235).choices[0].text
    check(a[0] == a[1], "the same seed gives the same answer")
    check(a[0] != b, "another seed gives another answer")
    words = ref.split()
    stop = " " + words[3]
    r = c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": "Once upon a time"}],
                                  max_tokens=40, temperature=0, stop=["@@@", stop])
    check(r.choices[0].message.content == ref[:ref.index(stop)] and r.choices[0].finish_reason == "stop",
          "a stop string cuts the answer before it (%r)" % stop)


def test_cached(s, c):
    system = ("Once upon a time there was a little girl named Lily who lived in a small house near the "
              "woods with her mother, her father and a big brown dog called Max.")
    rs = [c.chat.completions.create(model=s.model, max_tokens=4, temperature=0, messages=[
        {"role": "system", "content": system}, {"role": "user", "content": "One day %s" % who}])
        for who in ("Lily ran", "Max barked")]
    cached = rs[1].usage.prompt_tokens_details.cached_tokens
    check(rs[0].usage.prompt_tokens > 32 and cached >= 16,
          "a shared system prompt is reused: %d of %d prompt tokens cached" % (cached, rs[1].usage.prompt_tokens))


def test_cancel(args):
    """On a model slow enough (random weights: no early end of text) that the
    answer cannot be over before the client hangs up."""
    s = Server(args.bin, args.cancel_model)
    c = s.client()
    aborted = 'vllm:request_success_total{model_name="%s",finished_reason="abort"}' % s.model
    # ignore_eos (vLLM's extra): a seed whose answer ends at the end-of-text token goes on to max_tokens
    ends = None
    for seed in range(1, 41):
        r = c.completions.create(model=s.model, prompt="Once", max_tokens=200, temperature=1.0, seed=seed)
        if r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 199:
            ends = (seed, r.choices[0].text)
            break
    check(ends is not None, "one of 40 seeds ends its answer at the end-of-text token")
    if ends:
        r = c.completions.create(model=s.model, prompt="Once", max_tokens=200, temperature=1.0, seed=ends[0],
                                 extra_body={"ignore_eos": True})
        check(r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 200 and
              r.choices[0].text.startswith(ends[1]), "ignore_eos goes on past the end-of-text token to max_tokens")
    stream = c.chat.completions.create(model=s.model, messages=[{"role": "user", "content": "Once"}],
                                       max_tokens=2000, n=4, temperature=0, stream=True)
    for i, ch in enumerate(stream):
        if i == 8:
            break
    # /metrics draws the engine's snapshot, published at most every 50 ms while it runs
    running = 0
    for _ in range(50):
        running = s.metric("vllm:num_requests_running")
        if running >= 1:
            break
        time.sleep(0.02)
    check(running >= 1, "the stream runs after 8 chunks (/metrics, within a second)")
    stream.close()
    ok = False
    for _ in range(500):
        if (s.metric("vllm:num_requests_running") == 0 and s.metric("vllm:kv_cache_usage_perc") == 0 and
                s.metric(aborted) == 4 and s.metric("pagechat:http_disconnects_total") == 1):
            ok = True
            break
        time.sleep(0.02)
    check(ok, "closing the stream cancels the request's 4 completions and frees their blocks (/metrics)")
    s.stop()


def test_errors(s, c):
    try:
        c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        check(False, "unknown model raises NotFoundError")
    except openai.NotFoundError as e:
        check(e.body.get("code") == "model_not_found", "unknown model raises NotFoundError")
    try:
        c.completions.create(model=s.model, prompt="tale " * 3000, max_tokens=4)
        check(False, "a prompt over the context raises BadRequestError")
    except openai.BadRequestError as e:
        check("maximum context length" in e.message, "a prompt over the context raises BadRequestError")
    try:
        s.client(api_key="wrong").models.list()
        check(False, "a wrong key raises AuthenticationError")
    except openai.AuthenticationError:
        check(True, "a wrong key raises AuthenticationError")


def test_template(args):
    s = Server(args.bin, args.template_model)
    c = s.client()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(msgs, f)
    out = subprocess.run([args.bin, "template", "-m", args.template_model, "-f", f.name],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    os.unlink(f.name)
    ids = [int(x) for x in out[1].split()]
    r = c.chat.completions.create(model=s.model, messages=msgs, max_tokens=12, temperature=0)
    t = c.completions.create(model=s.model, prompt=ids, max_tokens=12, temperature=0)
    check(r.usage.prompt_tokens == len(ids), "a templated chat's prompt is `pagechat template`'s ids")
    check(t.choices[0].text.startswith(r.choices[0].message.content),
          "its greedy answer equals a completion of those ids (up to the end-of-turn stop)")
    s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/pagechat")
    ap.add_argument("--model", default="../shared/models/stories260K.gguf")
    ap.add_argument("--template-model")
    ap.add_argument("--cancel-model", default="build/models/rand-256x4-q8_0.gguf")
    args = ap.parse_args()
    s = Server(args.bin, args.model)
    try:
        c = s.client()
        check([m.id for m in c.models.list().data] == [s.model], "models.list() names the model")
        ref = test_greedy(s, c, args)
        test_stream(s, c, ref)
        test_n_seed_stop(s, c, ref)
        test_cached(s, c)
        test_errors(s, c)
    finally:
        s.stop()
    test_cancel(args)
    if args.template_model:
        test_template(args)
    print("openai %s: %d passed, %d failed" % (openai.__version__, passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
