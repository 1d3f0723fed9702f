#!/bin/sh
# tools/bench_beams.sh [-r ROUNDS] [-w W] [-n TOKENS] [-p PROMPT_WORDS] MODEL
# Beam search against sampling of the same width on the same prompt: one
# `batch` request {"beams": W} against one {"n": W} (temperature 0.8),
# both generating TOKENS tokens per completion after a prompt of PROMPT_WORDS
# words (about 2 tokens each), in alternating rounds. Prints the median wall
# time of each, their ratio, and the blocks each held at its peak (beside
# what W unshared sequences would hold). Run from the repository root.
set -eu
ROUNDS=5 W=4 N=64 P=250
while getopts r:w:n:p: o; do
	case $o in r) ROUNDS=$OPTARG ;; w) W=$OPTARG ;; n) N=$OPTARG ;; p) P=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
MODEL=${1:?usage: tools/bench_beams.sh [-r ROUNDS] [-w W] [-n TOKENS] [-p PROMPT_WORDS] MODEL}
BIN=${PAGECHAT:-build/pagechat}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
# a prompt of P words from the demo model's vocabulary (any text does)
python3 -c "
import random
random.seed(3)
w = 'the cat and dog ran to a big red house where they found some toys and played'.split()
print(' '.join(random.choice(w) for _ in range($P)))" >"$DIR/prompt.txt"
PROMPT=$(cat "$DIR/prompt.txt")
printf '{"prompt": "%s", "beams": %d, "max_tokens": %d}\n' "$PROMPT" "$W" "$N" >"$DIR/beams.jsonl"
printf '{"prompt": "%s", "n": %d, "max_tokens": %d, "temperature": 0.8, "seed": 1}\n' "$PROMPT" "$W" "$N" \
	>"$DIR/sample.jsonl"
field() { sed -n "s/.*\"$1\": \\([0-9.]*\\).*/\\1/p" "$2" | tail -1; }
: >"$DIR/t_beams"
: >"$DIR/t_sample"
i=0
while [ $i -lt "$ROUNDS" ]; do
	for kind in beams sample; do
		"$BIN" batch -m "$MODEL" -f "$DIR/$kind.jsonl" --kv-type f16 >"$DIR/$kind.out" 2>/dev/null
		field wall_s "$DIR/$kind.out" >>"$DIR/t_$kind"
	done
	i=$((i + 1))
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
tb=$(median "$DIR/t_beams")
ts=$(median "$DIR/t_sample")
gen_b=$(grep -c '"beam":' "$DIR/beams.out" || true)
pt=$(field prompt_tokens "$DIR/beams.out")
echo "model $MODEL: prompt $pt tokens, $N new tokens, width $W, $ROUNDS alternating rounds"
echo "beam search W=$W: median $tb s; blocks peak $(field blocks_used_peak "$DIR/beams.out") (W unshared: $(field beam_blocks_if_unshared "$DIR/beams.out"); $gen_b beams)"
echo "sampling  n=$W: median $ts s; blocks peak $(field blocks_used_peak "$DIR/sample.out")"
awk -v b="$tb" -v s="$ts" 'BEGIN {printf "beam / sampling time: %.2fx\n", b / s}'
