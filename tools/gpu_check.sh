#!/bin/sh
# tools/gpu_check.sh: everything issue #11 needs from a machine with an NVIDIA
# GPU, in one run (well under 10 minutes on an H200): the CUDA build, the
# comparison tests against the CPU backend, and the decode benchmark of an
# 8B-shaped random model (Q4_K and F16) against the HBM bandwidth.
#   tools/gpu_check.sh [PEAK_GBS]     (default 4800, the H200's HBM3e)
# Run from the repository root. Results go to stdout and build/gpu_check/.
set -u
PEAK=${1:-4800}
J=$(nproc 2>/dev/null || echo 4)
OUT=build/gpu_check
mkdir -p "$OUT"
step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }
fail=0

step "build (CUDA=1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
make -j"$J" CUDA=1 WERROR=1 all tools >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
make -j"$J" CUDA=1 test-models build/models/rand-256x4-q4_k.gguf build/models/rand-256x4-q6_k.gguf \
	>>"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }

step "8B-shaped random models"
GEN=build/cuda/tools/gen_rand_gguf
[ -f build/models/rand-8b-q4_k.gguf ] || $GEN --type q4_k --out build/models/rand-8b-q4_k.gguf || fail=1
[ -f build/models/rand-8b-f16.gguf ] || $GEN --type f16 --out build/models/rand-8b-f16.gguf || fail=1

step "make test-cuda (ops, models, engine; plus the 8B Q4_K logits)"
PAGECHAT_BIG_MODEL=build/models/rand-8b-q4_k.gguf timeout 300 make CUDA=1 test-cuda 2>&1 | tee "$OUT/test-cuda.log" | tail -40
tail -1 "$OUT/test-cuda.log" | grep -q ' passed, 0 failed$' || fail=1

if [ $fail = 1 ]; then
	step "test-cuda failed: the ops again with a sync after every kernel (names the failing one)"
	PAGECHAT_CUDA_SYNC=1 timeout 120 build/cuda/tests/cuda/test_cuda_ops 2>&1 | tail -20
	if command -v compute-sanitizer >/dev/null 2>&1; then
		step "compute-sanitizer memcheck on the ops"
		timeout 300 compute-sanitizer --tool memcheck build/cuda/tests/cuda/test_cuda_ops 2>&1 | tail -40
	fi
fi

step "greedy stories260K: CUDA vs CPU (CLI)"
P="Once upon a time"
build/pagechat generate --device cpu -m ../shared/models/stories260K.gguf -p "$P" --temp 0 -n 200 --ids >"$OUT/cpu.ids" 2>/dev/null
build/pagechat generate --device cuda -m ../shared/models/stories260K.gguf -p "$P" --temp 0 -n 200 --ids >"$OUT/cuda.ids" 2>"$OUT/cuda.err"
if cmp -s "$OUT/cpu.ids" "$OUT/cuda.ids"; then echo "same 200 tokens"; else echo "DIFFERENT tokens"; cat "$OUT/cuda.err"; fail=1; fi

step "info (GPU plan)"
build/pagechat info --device cuda build/models/rand-8b-q4_k.gguf 2>&1 | tail -4

for T in q4_k f16; do
	step "bench 8B $T: decode at batch 1 and 16 (goal: batch 1 >= 80% of $PEAK GB/s)"
	timeout 240 build/pagechat bench --device cuda -m build/models/rand-8b-$T.gguf -p 512 -n 128 -r 3 \
		--batch 1,16 --peak-gbs "$PEAK" 2>&1 | tee "$OUT/bench-$T.txt"
	timeout 120 build/pagechat bench --device cuda -m build/models/rand-8b-$T.gguf -p 0 -n 64 -r 2 \
		--batch 1 2>&1 | grep -i bandwidth
done

step "done"
[ $fail = 0 ] && echo "gpu_check: all checks passed" || echo "gpu_check: SOME CHECKS FAILED (see above and $OUT/)"
exit $fail
