#!/usr/bin/env python3
"""Fidelity of quantized copies of a real model, pagechat against llama.cpp.

  python3 tools/fidelity.py smollm2|gemma3 [--types Q4_0,Q8_0,...] [options]

For the model's original file and copies in each weight type (made once from
its F32 copy by llama.cpp's llama-quantize into build/models/fidelity/), both
engines are judged the same way on the same file, by closeness to the F32
model (../shared/testdata/README.md):

  greedy  the greedy tokens agreeing with the F32 answers: the common prefix
          of each prompt's greedy continuation with the F32 model's, summed
          over the prompts (the reference table's rows, whose F32 answers are
          llama.cpp's there, and more, answered by llama.cpp on the F32 copy:
          for SmolLM2 also the 137 of tools/fidelity_prompts.txt, as 12 let one
          early divergence swing a type's count by 60 tokens and 48 still left
          a 95% interval 0.35 wide; --prompts FILE
          sets another file); F32 K/V on both sides, as the table was made.
          Each prompt counts up to its first difference, so one near tie
          decides a prompt: the ratio's 95% interval (paired bootstrap over
          the prompts) says how far that moves it.
  KL      the mean KL divergence of the next-token distributions against the
          F32 model's over the text (default /usr/share/common-licenses/GPL-3,
          read at run time), in windows of --ctx tokens scoring their second
          half: llama-perplexity --kl-divergence-base / --kl-divergence for
          llama.cpp, pagechat perplexity --kl-base / --kl for pagechat, each
          against its own engine's F32 run. The same runs give the share of
          positions whose most likely token is the F32 model's (same top
          token): the greedy choice judged at every position of the text.

A type pagechat cannot load yet is reported as such. First the F32 model in
both engines: their perplexities, and the KL of pagechat's next-token
distributions against llama.cpp's own (pagechat perplexity --kl reads
llama-perplexity's base file; with --ctx past Gemma 3's 512-token window this
checks the windowed layers on long contexts). Needs: the model and its F32
copy (make real-models, make build/models/<name>-f32.gguf), pagechat and
build/<config>/tools/greedy_ids (make tools), llama.cpp's llama-quantize,
llama-perplexity and llama-server (tools/llamacpp.sh). Standard library only.
"""
import argparse
import json
import random
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

TYPES = ["Q4_1", "Q4_0", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]

MODELS = {
    "smollm2": {
        "orig": "build/models/SmolLM2-135M-Instruct.Q4_1.gguf", "orig_type": "Q4_1",
        "f32": "build/models/smollm2-f32.gguf", "table": "smollm2_chat_f32.tsv", "chat": True, "n": 64,
        "extra": ["Write a haiku about the sea.", "Explain photosynthesis in two sentences.",
                  "List three prime numbers greater than 20.", "Translate 'good morning' into French and Spanish.",
                  "What is 17 times 23?", "Give me a Python function that reverses a string.",
                  "Who wrote Romeo and Juliet?", "Summarize the plot of Cinderella in one paragraph."],
        "more": "tools/fidelity_prompts.txt",
    },
    "gemma3": {
        "orig": "build/models/gemma-3-270m-q4_k_m.gguf", "orig_type": "Q4_K_M",
        "f32": "build/models/gemma3-f32.gguf", "table": "gemma3_raw_f32.tsv", "chat": False, "n": 48,
        "extra": ["The three primary colors are", "Once upon a time, in a small village,",
                  "import numpy as np\n\ndef softmax(x):\n", "The boiling point of water at sea level is",
                  "In 1492, Christopher Columbus"],
    },
}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    return r.returncode, r.stdout, r.stderr


def llamacpp(tool):
    rc, out, err = run(["tools/llamacpp.sh", tool])
    if rc:
        sys.exit("fidelity: cannot get llama.cpp's %s: %s" % (tool, err.strip().splitlines()[-1:]))
    return out.strip()


def prompt_ids(a, m, text):
    """A user message rendered with the chat template, or raw text with BOS: pagechat's ids
    (the same as llama.cpp's: tests/real check that on the table's rows)."""
    if m["chat"]:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([{"role": "user", "content": text}], f)
        rc, out, err = run([a.pagechat, "template", "-m", m["f32"], "-f", f.name])
        os.unlink(f.name)
        line = out.splitlines()[1] if rc == 0 and len(out.splitlines()) > 1 else ""
    else:
        rc, line, err = run([a.pagechat, "tokenize", "-m", m["f32"], text])
    if rc:
        sys.exit("fidelity: tokenizing %r: %s" % (text, err.strip()))
    return [int(x) for x in line.split()]


class Server:
    """llama-server on one file, F32 K/V, flash attention off (the reference settings)."""

    def __init__(self, a, path):
        self.port = a.port
        self.p = subprocess.Popen([llamacpp("llama-server"), "-m", path, "--port", str(a.port), "-t", str(a.threads),
                                   "-c", "4096", "-ctk", "f32", "-ctv", "f32", "-fa", "off", "--no-warmup"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if urllib.request.urlopen("http://127.0.0.1:%d/health" % a.port, timeout=2).status == 200:
                    return
            except Exception:
                if self.p.poll() is not None:
                    break
                time.sleep(0.2)
        self.close()
        raise RuntimeError("llama-server did not start on %s" % path)

    def greedy(self, ids, n):
        req = {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "samplers": ["top_k"],
               "return_tokens": True, "cache_prompt": False}
        r = urllib.request.Request("http://127.0.0.1:%d/completion" % self.port, data=json.dumps(req).encode(),
                                   headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(r, timeout=600).read())["tokens"]

    def tokenize(self, text):
        r = urllib.request.Request("http://127.0.0.1:%d/tokenize" % self.port,
                                   data=json.dumps({"content": text, "add_special": True}).encode(),
                                   headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(r, timeout=600).read())["tokens"]

    def close(self):
        self.p.terminate()
        self.p.wait()


def pagechat_greedy(a, path, prompts, n):
    """pagechat's greedy continuations, or (None, why) when the file does not load."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    rc, out, err = run([a.greedy, path, f.name, "-n", str(n), "-t", str(a.threads)])
    os.unlink(f.name)
    if rc:
        return None, err.strip().splitlines()[-1] if err.strip() else "status %d" % rc
    return [[int(x) for x in line.split()] for line in out.splitlines()], None


def agreeing(answers, ref):
    """Per prompt: the tokens of the answer agreeing with the reference before the first difference."""
    per = []
    for got, want in zip(answers, ref):
        k = 0
        while k < min(len(got), len(want)) and got[k] == want[k]:
            k += 1
        per.append(k)
    return per


def interval(pc, lc, draws=4000):
    """A 95% interval of sum(pc) / sum(lc) over the prompts, by the paired bootstrap (the prompts drawn
    again with replacement, each draw the same prompts for both engines; a fixed seed): how far one
    prompt's early or late difference at a near tie moves the ratio."""
    rng = random.Random(1)
    n, rs = len(pc), []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        den = sum(lc[i] for i in idx)
        if den:
            rs.append(sum(pc[i] for i in idx) / den)
    rs.sort()
    return rs[int(0.025 * len(rs))], rs[int(0.975 * len(rs)) - 1]


def perplexity_llamacpp(a, path, base, compare):
    cmd = [llamacpp("llama-perplexity"), "-m", path, "-f", a.text, "-c", str(a.ctx), "-t", str(a.threads),
           "--kl-divergence-base", base]
    cmd += ["--kl-divergence"] if compare else ["--chunks", str(a.chunks)]
    rc, out, err = run(cmd)
    text = out + err
    kl = re.search(r"Mean\s+KLD:\s+([-0-9.e+]+)", text)
    ppl = re.search(r"Final estimate: PPL = ([0-9.]+)", text) or re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", text)
    top = re.search(r"Same top p:\s+([0-9.]+)", text)
    if rc or (compare and not kl):
        return None, None, None
    return ((float(kl.group(1)) if kl else None), (float(ppl.group(1)) if ppl else None),
            (float(top.group(1)) if top else None))


def perplexity_pagechat(a, path, base, compare):
    cmd = [a.pagechat, "perplexity", "-m", path, "-f", a.text, "-c", str(a.ctx), "-t", str(a.threads),
           "--kl" if compare else "--kl-base", base]
    if not compare:
        cmd += ["--chunks", str(a.chunks)]
    rc, out, err = run(cmd, env=dict(os.environ, PAGECHAT_DEVICE="cpu"))
    kl = re.search(r"KL divergence ([-0-9.e+]+)", out)
    ppl = re.search(r"perplexity ([0-9.]+)", out)
    top = re.search(r"same top token ([0-9.]+)%", out)
    if rc:
        return None, None, None
    return ((float(kl.group(1)) if kl else None), (float(ppl.group(1)) if ppl else None),
            (float(top.group(1)) if top else None))


def copy_of(a, m, name, t):
    if t == m["orig_type"]:
        return m["orig"]
    path = os.path.join(a.dir, "%s-%s.gguf" % (name, t.lower()))
    if not os.path.exists(path):
        rc, out, err = run([llamacpp("llama-quantize"), m["f32"], path + ".tmp", t])
        if rc:
            sys.exit("fidelity: llama-quantize to %s failed: %s" % (t, (out + err).strip().splitlines()[-1:]))
        os.replace(path + ".tmp", path)
    return path


def references(a, m):
    """The prompts and their F32 answers: the table's rows, then the extra prompts answered by
    llama.cpp on the F32 copy."""
    rows = [l.split("\t") for l in open(os.path.join(a.shared, "testdata", m["table"])).read().split("\n")[1:] if l]
    prompts = [[int(x) for x in r[1].split()] for r in rows]
    ref = [[int(x) for x in r[2].split()] for r in rows]
    more = m.get("more", "") if a.prompts is None else a.prompts
    texts = m["extra"] + ([l for l in open(more, encoding="utf-8").read().split("\n") if l.strip() and not l.startswith("#")]
                          if more else [])
    extra = [prompt_ids(a, m, t) for t in texts]
    srv = Server(a, m["f32"])
    try:
        ref += [srv.greedy(p, m["n"]) for p in extra]
        lc_text = srv.tokenize(open(a.text, encoding="utf-8", errors="replace").read())
    finally:
        srv.close()
    rc, out, err = run([a.pagechat, "tokenize", "-m", m["f32"], "-f", a.text])
    pc_text = [int(x) for x in out.split()]
    same = next((i for i, (x, y) in enumerate(zip(pc_text, lc_text)) if x != y), None)
    if same is None and len(pc_text) == len(lc_text):
        print("the text: %d tokens, the same ids in both engines" % len(pc_text))
    else:
        print("the text: pagechat %d tokens, llama.cpp %d, first difference at token %s" % (
            len(pc_text), len(lc_text), same if same is not None else min(len(pc_text), len(lc_text))))
    return prompts + extra, ref


def measure(a, m, name, t, prompts, ref, bases):
    path = copy_of(a, m, name, t)
    row = {"type": t, "mib": os.path.getsize(path) / 2**20}
    answers, why = pagechat_greedy(a, path, prompts, m["n"])
    row["why"] = why
    if answers is not None:
        row["pc_per"] = agreeing(answers, ref)
        row["pc_greedy"] = sum(row["pc_per"])
        row["pc_kl"], _, row["pc_top"] = perplexity_pagechat(a, path, bases[0], True)
    srv = Server(a, path)
    try:
        row["lc_per"] = agreeing([srv.greedy(p, m["n"]) for p in prompts], ref)
        row["lc_greedy"] = sum(row["lc_per"])
    finally:
        srv.close()
    row["lc_kl"], _, row["lc_top"] = perplexity_llamacpp(a, path, bases[1], True)
    return row


def ratio(x, y):
    return "%.2fx" % (x / y) if x is not None and y else "-"


def fmt(x, f):
    return f % x if x is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--pagechat", default="build/pagechat")
    ap.add_argument("--greedy", default="build/cpu/tools/greedy_ids")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    # one thread: the figures do not depend on it, and on a shared machine
    # llama.cpp's spinning threads wait for each other for whole time slices
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--dir", default="build/models/fidelity")
    ap.add_argument("--prompts", default=None,
                    help="a file of more prompts, one per line (smollm2: tools/fidelity_prompts.txt; '' for none)")
    a = ap.parse_args()
    m = MODELS[a.model]
    os.makedirs(a.dir, exist_ok=True)
    for need in (m["orig"], m["f32"], a.pagechat, a.greedy, a.text):
        if not os.path.exists(need):
            sys.exit("fidelity: %s is missing (see tools/fidelity.py's help)" % need)
    t0 = time.time()
    prompts, ref = references(a, m)
    bases = [os.path.join(a.dir, "%s-f32.%s.kld" % (a.model, e)) for e in ("pagechat", "llamacpp")]
    _, pc_ppl, _ = perplexity_pagechat(a, m["f32"], bases[0], False)
    _, lc_ppl, _ = perplexity_llamacpp(a, m["f32"], bases[1], False)
    n_ref = sum(len(r) for r in ref)
    print("%s: %d prompts, %d F32 answer tokens; KL over %s, %d windows of %d (the second half of each scored)"
          % (a.model, len(prompts), n_ref, a.text, a.chunks, a.ctx))
    print("F32 perplexity: pagechat %s, llama.cpp %s (llama.cpp scores a window's token ctx/2 + 1 on, pagechat "
          "ctx/2 on)" % (fmt(pc_ppl, "%.4f"), fmt(lc_ppl, "%.4f")))
    rc, out, err = run([a.pagechat, "perplexity", "-m", m["f32"], "-f", a.text, "-c", str(a.ctx), "-t", str(a.threads),
                        "--kl", bases[1]], env=dict(os.environ, PAGECHAT_DEVICE="cpu"))
    cross = re.search(r"KL divergence (\S+) \+- (\S+) .*same top token ([0-9.]+)%", out)
    print("F32, pagechat against llama.cpp's distributions: KL %s" % (
        "%s +- %s, same top token %s%%" % cross.groups() if cross else "failed: " + err.strip()[-200:]))
    print("%-7s %7s | %-40s | %-30s | %-16s" % ("type", "MiB", "greedy agreeing with F32", "KL divergence against F32",
                                                "same top token"))
    print("%-7s %7s | %8s %9s %7s %13s | %10s %10s %7s | %7s %8s" % (
        "", "", "pagechat", "llama.cpp", "ratio", "95% interval", "pagechat", "llama.cpp", "ratio", "pagechat",
        "llama.cpp"))
    sums = [0, 0]
    for t in a.types.split(","):
        r = measure(a, m, a.model, t, prompts, ref, bases)
        if r["why"]:
            print("%-7s %7.1f | %8s %9d %7s %13s | %10s %10s %7s | %7s %8s   pagechat: %s" % (
                t, r["mib"], "no load", r["lc_greedy"], "-", "-", "-", fmt(r["lc_kl"], "%.6f"), "-", "-",
                fmt(r["lc_top"], "%.2f%%"), r["why"]))
            continue
        lo, hi = interval(r["pc_per"], r["lc_per"])
        sums[0] += r["pc_greedy"]
        sums[1] += r["lc_greedy"]
        print("%-7s %7.1f | %8d %9d %7s %13s | %10s %10s %7s | %7s %8s" % (
            t, r["mib"], r["pc_greedy"], r["lc_greedy"], ratio(r["pc_greedy"], r["lc_greedy"]),
            "%.2f-%.2fx" % (lo, hi), fmt(r["pc_kl"], "%.6f"), fmt(r["lc_kl"], "%.6f"), ratio(r["pc_kl"], r["lc_kl"]),
            fmt(r["pc_top"], "%.2f%%"), fmt(r["lc_top"], "%.2f%%")), flush=True)
    print("all types: greedy %d against %d (%s)" % (sums[0], sums[1], ratio(sums[0], sums[1])))
    print("(%.0f s; greedy: higher is closer to F32, of %d per type; KL: lower is closer; same top token: of the\n"
          " text's scored positions, the share where the type's most likely token is the F32 model's, in each\n"
          " engine against its own F32 run)" % (time.time() - t0, n_ref))


if __name__ == "__main__":
    main()
