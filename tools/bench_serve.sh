#!/bin/sh
# tools/bench_serve.sh: `pagechat serve` against llama.cpp's llama-server under
# the same load: for each model and each concurrency C, both servers run with
# the same threads and C parallel sequences (llama-server: -np C slots with
# CTX tokens each), one after the other, round after round, and
# tools/loadtest.py drives C streams of greedy text completions that share a
# system prompt. Prints the medians over the rounds of time to first token and
# inter-token latency (p50, p99) and throughput, with pagechat / llama.cpp
# ratios, as a Markdown table.
#
#   tools/bench_serve.sh [-r ROUNDS] [-t THREADS] [-c 1,4,16] [-n TOKENS] [-q REQUESTS] MODEL.gguf...
#   (or: make bench-serve, on the 768x12 Q8_0 model and stories260K)
#
# llama-server comes from $LLAMA_SERVER if set, else tools/llamacpp.sh
# builds it once into build/llamacpp/ from the source of the llama-cpp-python
# package on PyPI (the same pinned package tools/bench_llamacpp.sh builds
# llama-bench from; needs pip, cmake and g++). The load generator runs on
# $PYTHON (default: the virtualenv make test-openai installs the openai client into).
set -eu

ROUNDS=3
THREADS=$(nproc)
LEVELS=1,4,16
TOKENS=64
REQUESTS=3
CTX=1024
while [ $# -gt 0 ]; do
	case "$1" in
	-r) ROUNDS=$2; shift 2 ;;
	-t) THREADS=$2; shift 2 ;;
	-c) LEVELS=$2; shift 2 ;;
	-n) TOKENS=$2; shift 2 ;;
	-q) REQUESTS=$2; shift 2 ;;
	-h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_serve: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "bench_serve: no model given (usage: $0 [-r R] [-t T] MODEL.gguf...)" >&2; exit 2; }
PAGECHAT=${PAGECHAT:-build/pagechat}
PYTHON=${PYTHON:-build/venv-openai/bin/python}
[ -x "$PAGECHAT" ] || { echo "bench_serve: $PAGECHAT not built (run make first)" >&2; exit 2; }
[ -x "$PYTHON" ] || { echo "bench_serve: $PYTHON missing (make build/venv-openai/.installed)" >&2; exit 2; }

# built once (or $LLAMA_SERVER) by the script the client tests and benchmarks share
LLAMA_SERVER=${LLAMA_SERVER:-$(tools/llamacpp.sh llama-server)}

OUT=$(mktemp)
LOG=$(mktemp)
PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -f "$OUT" "$LOG"' EXIT

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until $1/health answers 200 (llama-server says 503 while it loads).
wait_ready() {
	i=0
	until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' \
		"$1" 2>/dev/null; do
		i=$((i + 1))
		[ "$i" -lt 600 ] || { echo "bench_serve: $2 did not start; its log:" >&2; cat "$LOG" >&2; exit 1; }
		sleep 0.1
	done
}

stop_server() {
	kill "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
	PID=""
}

# load WHO MODEL NAME BASE C: one loadtest run, appended to $OUT.
load() {
	"$PYTHON" tools/loadtest.py --base "$4" --model "$3" --concurrency "$5" --requests "$REQUESTS" \
		--max-tokens "$TOKENS" --label "$1	$2" >>"$OUT"
}

echo "bench_serve: $PAGECHAT serve against $LLAMA_SERVER, $THREADS threads, concurrency $LEVELS," \
	"$REQUESTS requests of $TOKENS tokens per stream, $ROUNDS rounds" >&2
for m in "$@"; do
	[ -f "$m" ] || { echo "bench_serve: $m: no such file" >&2; exit 2; }
	name=$(basename "$m" .gguf)
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		for c in $(echo "$LEVELS" | tr , ' '); do
			echo "bench_serve: $name round $r, concurrency $c" >&2
			port=$(free_port)
			"$LLAMA_SERVER" -m "$m" -t "$THREADS" -tb "$THREADS" -np "$c" -c $((CTX * c)) \
				--host 127.0.0.1 --port "$port" >"$LOG" 2>&1 &
			PID=$!
			wait_ready "http://127.0.0.1:$port" llama-server
			load llamacpp "$name" "$name" "http://127.0.0.1:$port" "$c"
			stop_server
			port=$(free_port)
			PAGECHAT_DEVICE=cpu "$PAGECHAT" serve -m "$m" --threads "$THREADS" --parallel "$c" -c "$CTX" \
				--port "$port" >"$LOG" 2>&1 &
			PID=$!
			wait_ready "http://127.0.0.1:$port" "pagechat serve"
			load pagechat "$name" "$name" "http://127.0.0.1:$port" "$c"
			stop_server
		done
		r=$((r + 1))
	done
done

python3 - "$OUT" <<'EOF'
import json, statistics, sys
runs, order = {}, []
for line in open(sys.argv[1]):
    o = json.loads(line)
    who, model = o["label"].split("\t")
    key = (model, o["concurrency"])
    if key not in runs:
        runs[key] = {"pagechat": [], "llamacpp": []}
        order.append(key)
    runs[key][who].append(o)
med = lambda rs, k: statistics.median(r[k] for r in rs)
cols = [("ttft_p50_ms", "TTFT p50 ms", True), ("ttft_p99_ms", "TTFT p99 ms", True),
        ("itl_p50_ms", "ITL p50 ms", True), ("itl_p99_ms", "ITL p99 ms", True),
        ("e2e_p50_ms", "request p50 ms", True), ("tok_per_s", "tok/s", False)]
print("| model | streams | " + " | ".join(c[1] + " (pagechat vs llama.cpp)" for c in cols) + " |")
print("| --- | --- |" + " --- |" * len(cols))
for model, c in order:
    p, l = runs[(model, c)]["pagechat"], runs[(model, c)]["llamacpp"]
    if not p or not l:
        continue
    cells = []
    for k, _, lower_better in cols:
        a, b = med(p, k), med(l, k)
        ratio = (b / a if lower_better else a / b) if a and b else float("nan")
        cells.append("%.4g vs %.4g, %.2fx" % (a, b, ratio))
    print("| %s | %d | %s |" % (model, c, " | ".join(cells)))
print("\nratios: > 1 means pagechat is better (faster first token, shorter gaps, more tokens/s)")
EOF
