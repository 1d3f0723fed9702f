#!/bin/sh
# tools/kv_accuracy.sh [MODEL]: the KV types' accuracy and capacity figures.
# Writes a text of about 5,600 tokens (14 stories the model tells itself,
# seeds 1..14, temperature 0.8), then its perplexity with every K/V type in
# windows of 512, each against f32 K/V, and the pool capacity per type.
# Needs build/pagechat (make).
set -eu
model=${1:-../shared/models/stories260K.gguf}
bin=build/pagechat
text=build/kv-accuracy.txt
: > "$text"
for seed in 1 2 3 4 5 6 7 8 9 10 11 12 13 14; do
	$bin generate -m "$model" -p "Once upon a time" --temp 0.8 --seed $seed -n 400 2>/dev/null >> "$text"
	echo >> "$text"
done
echo "text: $text, $($bin tokenize -m "$model" -f "$text" 2>/dev/null | wc -w) tokens"
ppl() { $bin perplexity -m "$model" -f "$text" -c 512 --kv-type-k "$1" --kv-type-v "$2" 2>/dev/null |
	sed -n 's/^perplexity \([0-9.]*\).*/\1/p'; }
base=$(ppl f32 f32)
echo "K/V      perplexity  vs f32"
for kv in "f32 f32" "f16 f16" "q8 q8" "fp8 fp8" "q8 fp8" "fp8 q8"; do
	set -- $kv
	p=$(ppl "$1" "$2")
	echo "$1/$2 $p $base" | awk '{printf "%-8s %10s  %+.2f%%\n", $1, $2, 100 * ($2 / $3 - 1)}'
done
$bin info "$model" | grep '^KV '
