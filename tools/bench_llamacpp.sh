#!/bin/sh
# tools/bench_llamacpp.sh: pagechat's bench against llama.cpp's llama-bench on
# this machine, in the same run: the two alternate, round after round, on each
# model with the same threads and test sizes, and the medians and their ratio
# (pagechat / llama.cpp) are printed per model and test.
#
#   tools/bench_llamacpp.sh [-r ROUNDS] [-t THREADS] [-p 512] [-n 128] [-d DEPTH] [-b 4,16] MODEL.gguf...
#   (or: make bench-llamacpp, over the 768x12 models and stories260K)
#
# -b adds batched decoding: -n tokens for each of B sequences at once, every
# sequence -p tokens deep, the total tokens/s: `pagechat bench --batch B -d P`
# against llama.cpp's llama-batched-bench (-npl B -npp P -ntg N; each of its
# sequences has a prompt of its own, as here), tests "tgN xB".
#
# llama-bench comes from $LLAMA_BENCH if set, else tools/llamacpp.sh builds it
# once into build/llamacpp/ from the source of the llama-cpp-python package on
# PyPI (it carries llama.cpp), CPU only, for this machine's ISA; that needs
# pip, cmake and g++ (installed with apt-get when run as root) and takes about
# 5 minutes on two cores (LLAMACPP_AMX=off: without AMX, see tools/llamacpp.sh).
# BENCH_RAW=FILE keeps every round's JSON lines there. Nothing of it enters the repository. Both
# programs keep their default K/V cache type (f16) and read the model through
# mmap; alternating rounds spread a noisy machine's slow spells over both.
set -eu

ROUNDS=5
THREADS=$(nproc)
PP=512
TG=128
DEPTH=0
BATCH=""
while [ $# -gt 0 ]; do
	case "$1" in
	-r) ROUNDS=$2; shift 2 ;;
	-t) THREADS=$2; shift 2 ;;
	-p) PP=$2; shift 2 ;;
	-n) TG=$2; shift 2 ;;
	-d) DEPTH=$2; shift 2 ;;
	-b) BATCH=$2; shift 2 ;;
	-h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_llamacpp: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "bench_llamacpp: no model given (usage: $0 [-r R] [-t T] MODEL.gguf...)" >&2; exit 2; }
for m in "$@"; do
	[ -f "$m" ] || { echo "bench_llamacpp: $m: no such file" >&2; exit 2; }
done

PAGECHAT=${PAGECHAT:-build/pagechat}
[ -x "$PAGECHAT" ] || { echo "bench_llamacpp: $PAGECHAT not built (run make first)" >&2; exit 2; }

LLAMA_BENCH=${LLAMA_BENCH:-$(tools/llamacpp.sh llama-bench)}
[ -z "$BATCH" ] || LLAMA_BATCHED=${LLAMA_BATCHED:-$(tools/llamacpp.sh llama-batched-bench)}

# A sanitizer build (make test SANITIZE=1 points build/pagechat at one) runs
# many times slower: its figures would be meaningless, so refuse it.
case $("$PAGECHAT" bench -m "$1" -p 0 -n 1 -r 1 --json 2>/dev/null) in
*'san", "threads"'*) echo "bench_llamacpp: $PAGECHAT is a sanitizer build; run make (no SANITIZE) first" >&2; exit 2 ;;
esac
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
[ -z "${BENCH_RAW:-}" ] || trap 'cp "$OUT" "$BENCH_RAW"; rm -f "$OUT"' EXIT
echo "bench_llamacpp: $PAGECHAT against $LLAMA_BENCH, $THREADS threads, pp$PP and tg$TG at depth $DEPTH, $ROUNDS rounds" >&2
for m in "$@"; do
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		echo "bench_llamacpp: $m round $r of $ROUNDS" >&2
		"$PAGECHAT" bench -m "$m" -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" -r 1 --batch 1 --json 2>/dev/null |
			sed "s|^|pagechat\t$m\t|" >>"$OUT"
		"$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$PP" -n "$TG" -d "$DEPTH" -r 1 -o jsonl 2>/dev/null |
			sed "s|^|llamacpp\t$m\t|" >>"$OUT"
		if [ -n "$BATCH" ]; then
			most=$(echo "$BATCH" | tr , '\n' | sort -n | tail -1)
			"$PAGECHAT" bench -m "$m" -t "$THREADS" -p 0 -n "$TG" -d "$PP" -r 1 --batch "$BATCH" --json \
				2>/dev/null | sed "s|^|pagechat\t$m\t|" >>"$OUT"
			"$LLAMA_BATCHED" -m "$m" -t "$THREADS" -c $(((PP + TG) * most + 16)) -b 2048 -ub 512 \
				-npp "$PP" -ntg "$TG" -npl "$BATCH" --output-format jsonl 2>/dev/null |
				sed "s|^|llamacpp\t$m\t|" >>"$OUT"
		fi
		r=$((r + 1))
	done
done

python3 - "$OUT" "$PP" "$TG" "$DEPTH" <<'EOF'
import json, statistics, sys
path, pp, tg, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {}  # (model, test) -> {"pagechat": [...], "llamacpp": [...]}
frac = {}  # (model, test) -> pagechat's fractions of bench's limit
order = []
for line in open(path):
    who, model, js = line.rstrip("\n").split("\t", 2)
    try:
        o = json.loads(js)
    except ValueError:
        continue
    got = []
    if who == "pagechat":
        for t in o.get("tests", []):
            name = t["test"].split(" @")[0]  # "tg128 @d2048" at a depth
            if name in ("pp%d" % pp, "tg%d" % tg) and t.get("seqs", 1) == 1 and o.get("depth") == depth:
                got.append((name, t["tps_mean"]))
                if t.get("of_limit"):
                    frac.setdefault((model, name), []).append(t["of_limit"])
            elif name == "tg%d x%d" % (tg, t.get("seqs", 1)) and t.get("seqs", 1) > 1 and o.get("depth") == pp:
                got.append((name, t["tps_mean"]))
    elif "speed_tg" in o:  # llama-batched-bench: all its sequences' tokens per second
        if o.get("pl", 1) > 1:
            got.append(("tg%d x%d" % (o["tg"], o["pl"]), o["speed_tg"]))
    else:
        if o.get("n_prompt") and not o.get("n_gen"):
            got.append(("pp%d" % o["n_prompt"], o["avg_ts"]))
        elif o.get("n_gen") and not o.get("n_prompt"):
            got.append(("tg%d" % o["n_gen"], o["avg_ts"]))
    for test, tps in got:
        key = (model, test)
        if key not in runs:
            runs[key] = {"pagechat": [], "llamacpp": []}
            order.append(key)
        runs[key][who].append(tps)
print("| %-40s | %-9s | %14s | %14s | %7s | %8s |" % ("model", "test", "pagechat t/s", "llama.cpp t/s", "ratio",
                                                   "of limit"))
print("|%s|%s|%s|%s|%s|%s|" % ("-" * 42, "-" * 11, "-" * 16, "-" * 16, "-" * 9, "-" * 10))
bad = 0
for key in order:
    a, b = runs[key]["pagechat"], runs[key]["llamacpp"]
    if not a or not b:
        print("| %-40s | %-9s | %s |" % (key[0][-40:], key[1], "missing: a run failed"))
        bad = 1
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    f = frac.get(key)
    print("| %-40s | %-9s | %14.2f | %14.2f | %6.2fx | %8s |" % (key[0][-40:], key[1], ma, mb, ma / mb,
                                                            "%.1f%%" % (100 * statistics.median(f)) if f else ""))
print("of limit: the median of pagechat's fraction of the limit its bench prints (int8 rate or bandwidth)")
print("medians of %d alternating rounds each" % max(len(v["pagechat"]) for v in runs.values()) if runs else "no results")
sys.exit(bad)
EOF
