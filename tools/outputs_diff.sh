#!/bin/sh
# tools/outputs_diff.sh OLD_PAGECHAT NEW_PAGECHAT [OUTDIR]
# Runs the same set of commands with two pagechat binaries and diffs what
# they print (timings and speed figures removed): greedy `generate --ids`
# over every prompt of the shared greedy.tsv (f32 and the default f16 K/V),
# seeded sampling, drafts (model and n-gram), `logits` over logits.tsv, and
# a 64-request `batch` (n > 1, stop strings, seeds, a small pool that forces
# preemption). For refactors that must change no output. Exit 0 when every
# output is identical. Run from the repository root after `make test-models`.
set -u
OLD=$1 NEW=$2 OUT=${3:-build/outputs_diff}
MODEL=../shared/models/stories260K.gguf
R256=build/models/rand-256x4-f32.gguf
DRAFT=build/models/rand-draft.gguf
mkdir -p "$OUT"
REQS=$OUT/requests.jsonl
: >"$REQS"
i=0
while [ $i -lt 64 ]; do
	case $((i % 4)) in
	0) echo "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": $((8 + i % 40)), \"temperature\": 0}" ;;
	1) echo "{\"prompt\": \"Lily and Tom $i\", \"max_tokens\": 24, \"n\": 3, \"temperature\": 0.9, \"seed\": $i}" ;;
	2) echo "{\"prompt\": \"The dog ran\", \"max_tokens\": 40, \"stop\": [\"park\"], \"temperature\": 0.7, \"seed\": $i}" ;;
	3) echo "{\"prompt\": \"Once upon a time there was a little girl named Lily. She $i\", \"max_tokens\": 64}" ;;
	esac >>"$REQS"
	i=$((i + 1))
done

# Prints everything the commands produce, one labelled block each.
run_all() {
	bin=$1
	tail -n +2 ../shared/testdata/greedy.tsv | cut -f1 | while read -r p; do
		p=$(printf '%s' "$p" | sed 's/^"//; s/"$//')
		for kv in f32 f16; do
			echo "== generate greedy kv $kv: $p"
			"$bin" generate -m $MODEL -p "$p" -n 64 --temp 0 --ids --kv-type $kv 2>/dev/null
		done
		echo "== generate sampled: $p"
		"$bin" generate -m $MODEL -p "$p" -n 48 --temp 0.8 --top-p 0.9 --seed 7 --ids 2>/dev/null
		echo "== generate draft model: $p"
		"$bin" generate -m $MODEL -p "$p" -n 48 --temp 0 -md $DRAFT --ids 2>/dev/null
		echo "== generate ngram: $p"
		"$bin" generate -m $MODEL -p "$p" -n 48 --temp 0.7 --seed 3 --draft ngram --ids 2>/dev/null
	done
	tail -n +2 ../shared/testdata/logits.tsv | cut -f1 | while read -r p; do
		p=$(printf '%s' "$p" | sed 's/^"//; s/"$//')
		echo "== logits: $p"
		"$bin" logits -m $MODEL -p "$p" --kv-type f32 2>/dev/null
		echo "== logits rand256: $p"
		"$bin" logits -m $R256 -p "$p" 2>/dev/null
	done
	# batch: ids and text per completion; the summary's counts without timings
	for args in "--parallel 16" "--parallel 64 --pool-blocks 40 --chunk 64" "--policy static --parallel 8"; do
		echo "== batch $args"
		"$bin" batch -m $MODEL -f "$REQS" $args 2>/dev/null |
			sed -E 's/"[a-z_]*(_ms|_s|per_s|tps|_tok_s)(_[a-z0-9]+)?": *[0-9.e+-]+,? *//g'
	done
}

run_all "$OLD" >"$OUT/old.txt"
run_all "$NEW" >"$OUT/new.txt"
blocks=$(grep -c '^== ' "$OUT/new.txt")
if cmp -s "$OUT/old.txt" "$OUT/new.txt"; then
	echo "outputs_diff: $blocks outputs identical ($(wc -c <"$OUT/new.txt") bytes; $OUT/new.txt)"
	exit 0
fi
diff "$OUT/old.txt" "$OUT/new.txt" | head -40
echo "outputs_diff: outputs DIFFER (full diff: diff $OUT/old.txt $OUT/new.txt)"
exit 1
