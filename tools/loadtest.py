#!/usr/bin/env python3
"""tools/loadtest.py: concurrent streams against an OpenAI-compatible server.

    loadtest.py --base http://127.0.0.1:8080 --model NAME [--concurrency 4]
                [--requests 3] [--max-tokens 64] [--key KEY] [--label NAME]

Runs CONCURRENCY streams at once with the `openai` async client; each stream
sends REQUESTS streaming text completions one after another. Every prompt is
the same system text (a few hundred tokens, shared, as chat front-ends send)
followed by a question of its own; greedy sampling, MAX_TOKENS tokens each
(ignore_eos, which pagechat, vLLM and llama-server all take: no answer ends
early, so both servers generate the same number of tokens).
Measures on the client: time to first token (send -> first token chunk),
the inter-token latency (gaps between token chunks), the whole request's
time, and throughput (the tokens the usage reports / wall time of the run).
One Python process parses about 2,000 chunks a second: above that the
figures are the client's, not the server's. Prints one JSON line with p50/p99 of both and the totals.
"""
import argparse
import asyncio
import json
import statistics
import time

import openai

SYSTEM = (
    "You are a careful storyteller for small children. Every story you tell is short and kind, set in a "
    "little town by the sea where a girl named Lily lives with her dog Max, her mother and her father. "
    "Lily likes shells, boats, the lighthouse and the old fisherman Tom, who knows every bird on the "
    "shore by name. Max likes to chase the waves and to dig in the sand. Stories happen in the morning "
    "or in the afternoon, never at night; nobody is ever hurt or lost for long; there is always a small "
    "problem, and the friends solve it together by being patient and helping each other. Use simple "
    "words. Keep sentences short. End every story with a happy thought about the sea. "
)


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one(client, model, prompt, max_tokens, out):
    """One streamed request. Every chunk that carries a choice and no
    finish_reason is a token (llama-server sends one per token even while
    it holds back the bytes of an unfinished character; pagechat skips
    those), and the usage, where the server sends it, gives the count."""
    t0 = time.perf_counter()
    last = None
    n = used = 0
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True})
    async for chunk in stream:
        if getattr(chunk, "usage", None):
            used = chunk.usage.completion_tokens
        if not chunk.choices or chunk.choices[0].finish_reason:
            continue
        now = time.perf_counter()
        if last is None:
            out["ttft"].append(now - t0)
        else:
            out["itl"].append(now - last)
        last = now
        n += 1
    out["tokens"] += used or n
    out["e2e"].append(time.perf_counter() - t0)


async def worker(client, model, w, requests, max_tokens, out):
    for r in range(requests):
        q = "Question %d.%d: tell the story of the day Max found a %s on the beach.\n" % (
            w, r, ["red shell", "green bottle", "lost kite", "small crab", "wooden boat"][(w + r) % 5])
        await one(client, model, SYSTEM + q, max_tokens, out)


async def run(a):
    client = openai.AsyncOpenAI(base_url=a.base + "/v1", api_key=a.key or "none", max_retries=0,
                                timeout=600)
    out = {"ttft": [], "itl": [], "e2e": [], "tokens": 0}
    # one warm-up request: the shared prefix gets cached, as it would be in use
    await one(client, a.model, SYSTEM + "Warm up.\n", 4, {"ttft": [], "itl": [], "e2e": [], "tokens": 0})
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(client, a.model, w, a.requests, a.max_tokens, out)
                           for w in range(a.concurrency)))
    wall = time.perf_counter() - t0
    await client.close()
    ms = lambda s: round(s * 1000, 2)
    print(json.dumps({
        "label": a.label, "concurrency": a.concurrency, "requests": a.concurrency * a.requests,
        "tokens": out["tokens"], "wall_s": round(wall, 3),
        "ttft_p50_ms": ms(pct(out["ttft"], 50)), "ttft_p99_ms": ms(pct(out["ttft"], 99)),
        "itl_p50_ms": ms(pct(out["itl"], 50)), "itl_p99_ms": ms(pct(out["itl"], 99)),
        "e2e_p50_ms": ms(pct(out["e2e"], 50)), "e2e_p99_ms": ms(pct(out["e2e"], 99)),
        "tok_per_s": round(out["tokens"] / wall, 1),
        "ttft_mean_ms": ms(statistics.mean(out["ttft"])) if out["ttft"] else None,
    }), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--key")
    ap.add_argument("--label", default="")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
