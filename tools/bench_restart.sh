#!/bin/sh
# tools/bench_restart.sh [-w WORDS] [-r ROUNDS] MODEL
# Time to first token after a restart, with and without the disk KV store:
# a conversation of about WORDS words (default 1000, about 2,000 tokens) is
# run once with --kv-store (its blocks are written to disk), then the next
# turn (the same text and a new sentence) starts in a fresh process, once
# recomputing the whole prompt and once with the store, ROUNDS times each in
# alternating order. Prints the medians, the speed-up and checks that both
# give the same tokens. Run from the repository root.
set -eu
WORDS=1000 ROUNDS=3
while getopts w:r: o; do
	case $o in w) WORDS=$OPTARG ;; r) ROUNDS=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
MODEL=${1:?usage: tools/bench_restart.sh [-w WORDS] [-r ROUNDS] MODEL}
BIN=${PAGECHAT:-build/pagechat}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
python3 -c "
import random
random.seed(5)
w = 'the cat and dog ran to a big red house where they found some toys and played all day long'.split()
print(' '.join(random.choice(w) for _ in range($WORDS)))" >"$DIR/turn1.txt"
{ cat "$DIR/turn1.txt"; echo " And then the little bird sang a song for them."; } >"$DIR/turn2.txt"
ctx=$(( WORDS * 3 + 512 ))
# the first turn writes its blocks
"$BIN" generate -m "$MODEL" -f "$DIR/turn1.txt" -n 1 --temp 0 -c $ctx --kv-store "$DIR/store" \
	>/dev/null 2>"$DIR/first.err"
prompt_s() { sed -n 's/^prompt: \([0-9]*\) tokens, \([0-9.]*\) tok\/s.*/\1 \2/p' "$1" | awk '{print $1 / $2}'; }
: >"$DIR/recompute"
: >"$DIR/disk"
i=0
while [ $i -lt "$ROUNDS" ]; do
	"$BIN" generate -m "$MODEL" -f "$DIR/turn2.txt" -n 16 --temp 0 -c $ctx --ids >"$DIR/ids.recompute" \
		2>"$DIR/err"
	prompt_s "$DIR/err" >>"$DIR/recompute"
	"$BIN" generate -m "$MODEL" -f "$DIR/turn2.txt" -n 16 --temp 0 -c $ctx --ids --kv-store "$DIR/store" \
		>"$DIR/ids.disk" 2>"$DIR/err"
	prompt_s "$DIR/err" >>"$DIR/disk"
	i=$((i + 1))
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
tokens=$(sed -n 's/^prompt: \([0-9]*\) tokens.*/\1/p' "$DIR/err")
rc=$(median "$DIR/recompute")
dk=$(median "$DIR/disk")
echo "model $MODEL: next turn of $tokens prompt tokens after a restart, $ROUNDS rounds"
grep '^kv tiers' "$DIR/err" || true
echo "time to first token: recompute ${rc}s, disk store ${dk}s: $(awk -v a="$rc" -v b="$dk" 'BEGIN {printf "%.1fx", a / b}') faster"
if cmp -s "$DIR/ids.recompute" "$DIR/ids.disk"; then echo "same tokens"; else echo "DIFFERENT tokens"; exit 1; fi
