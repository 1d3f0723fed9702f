#!/usr/bin/env bash
# tools/gpu_check.sh: what a lent GPU machine must run (issues #26, #11), as
# two calls of the device tool that each end well inside its 600 s limit.
#
#   tools/gpu_check.sh --stage    here: gathers what the device machine lacks
#       into gpu_stage/ (ignored by git; name it in the tool's carry): the
#       stories260K model, two vocabularies and the model generator from
#       ../shared, and .debs of the build's libraries (ncursesw, readline,
#       libyaml, libmicrohttpd, libcurl) in case the machine's image has no headers for them
#   tools/gpu_check.sh --call 1   there: prerequisites, the CUDA build for the
#       GPU's own architecture, make test-cuda (every op, whole models, every
#       partial split), the model tests again with recorded steps (CUDA
#       graphs), greedy stories260K on the CLI, all layers and 3 of 5 on the GPU
#   tools/gpu_check.sh --call 2   there: 8B-shaped random models (Q4_K, F16),
#       the Q4_K logits against the CPU (all layers, then half, on the GPU),
#       decode benchmarks with and without recorded steps, against the HBM
#       bandwidth, partial offload (-ngl 16, and auto on a 4 GiB cap), the
#       plan for a 70B shape on 24 GiB
#   tools/gpu_check.sh --dry-run  here: both calls on a copy of the checkout
#       as the tool sends it (no ../shared), with the fake device (CPU kernels
#       behind host "device" buffers) where the GPU would be and small models
#       in place of the 8B ones, timing every step
#
# Options: --out DIR (default $OUT where the device tool sets it, else
# build/gpu_check), --peak-gbs G (default 4800, an H200's HBM3e), --budget S
# (seconds a call may take, default 400: a step's time limit shrinks to what
# is left, a step with under 5 s left is skipped; give the tool a timeout_s
# of 460), --fake (a call on the fake device; --dry-run passes it), --keep
# (--dry-run keeps its copy). Every log and figure goes to the output folder, at most
# 8 files a call (what the tool brings back); each call ends with a table of
# its steps, their status and seconds. Exit status: 0 when every check passed,
# 1 when one failed, 2 when a prerequisite is missing.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

STAGE=gpu_stage
MODE="" CALL="" FAKE=0 PEAK=4800 BUDGET=400 KEEP=0 USE_STAGED=0
OUTDIR=${OUT:-build/gpu_check}
while [ $# -gt 0 ]; do
	case $1 in
	--stage) MODE=stage ;;
	--dry-run) MODE=dry ;;
	--call) MODE=call CALL=${2:-}; shift ;;
	--fake) FAKE=1 ;;
	--keep) KEEP=1 ;;
	--use-staged-debs) USE_STAGED=1 ;;
	--out) OUTDIR=${2:-}; shift ;;
	--peak-gbs) PEAK=${2:-}; shift ;;
	--budget) BUDGET=${2:-}; shift ;;
	*) sed -n '2,30p' "$0"; exit 2 ;;
	esac
	shift
done

J=$(nproc 2>/dev/null || echo 4)
SUMMARY=()
FAILED=0
DEADLINE=$((SECONDS + BUDGET))

# run_step NAME LIMIT LOG CMD...: CMD with a timeout of LIMIT seconds (less
# when the call's budget has less left; skipped under 5), its output appended
# to LOG; the status and the seconds go into the summary table.
run_step() {
	local name=$1 limit=$2 log=$3 rc st t0 dt
	shift 3
	local left=$((DEADLINE - SECONDS))
	((limit > left)) && limit=$left
	if ((limit < 5)); then
		SUMMARY+=("$(printf '| %-44s | %-7s | %5s | %5s |' "$name" skipped - "$2")")
		FAILED=1
		return 124
	fi
	printf '=== %s (limit %d s, %s)\n' "$name" "$limit" "$(date -u +%T)" | tee -a "$log"
	t0=$SECONDS
	timeout -k 5 "$limit" "$@" >>"$log" 2>&1
	rc=$?
	dt=$((SECONDS - t0))
	st=ok
	((rc == 124 || rc == 137)) && st=timeout
	((rc != 0 && rc != 124 && rc != 137)) && st=failed
	if ((rc != 0)); then
		FAILED=1
		tail -n 20 "$log"
	fi
	SUMMARY+=("$(printf '| %-44s | %-7s | %5d | %5d |' "$name" "$st" "$dt" "$limit")")
	return $rc
}

summary() {
	printf '\n| %-44s | %-7s | %5s | %5s |\n' "step (call ${CALL:-?}$([ $FAKE = 1 ] && echo ', fake device'))" status s limit
	printf '|%s|%s|%s|%s|\n' "----------------------------------------------" ---------- ------- -------
	printf '%s\n' "${SUMMARY[@]}"
	printf 'call %s: %d s of a %d s budget; %s\n' "${CALL:-?}" "$SECONDS" "$BUDGET" \
		"$([ $FAILED = 0 ] && echo 'every check passed' || echo 'SOME CHECKS FAILED (see the logs)')"
}

# ---- prerequisites ----

# ok|MISSING|note lines to $1; MISSING anything the call cannot do without.
PRE_MISSING=0
pre() {
	printf '%-22s %-8s %s\n' "$1" "$2" "$3" | tee -a "$PRE_LOG"
	[ "$2" = MISSING ] && PRE_MISSING=1
	return 0
}

# Unpacks the staged .debs into gpu_stage/sysroot and points the build at it.
use_staged_debs() {
	local root=$PWD/$STAGE/sysroot lib
	[ -n "$(ls "$STAGE"/debs/*.deb 2>/dev/null)" ] || return 1
	mkdir -p "$root"
	for d in "$STAGE"/debs/*.deb; do
		if command -v dpkg >/dev/null; then
			dpkg -x "$d" "$root" || return 1
		else
			(t=$(mktemp -d) && cd "$t" && ar x "$OLDPWD/$d" && tar -xf data.tar.* -C "$root" && rm -rf "$t") || return 1
		fi
	done
	lib=$root/usr/lib/x86_64-linux-gnu
	export CPPFLAGS="-I$root/usr/include" LDFLAGS="-L$lib -Wl,-rpath,$lib"
}

# The libraries' headers and linking, with the flags exported so far.
libs_link() {
	cc ${CPPFLAGS:-} -x c - ${LDFLAGS:-} -o /tmp/pagechat-probe -lncursesw -lreadline -lyaml -lmicrohttpd -lcurl \
		2>/dev/null <<-'EOF'
	#include <stdio.h>
	#include <ncurses.h>
	#include <readline/readline.h>
	#include <yaml.h>
	#include <microhttpd.h>
	#include <curl/curl.h>
	int main(void) { return 0; }
	EOF
}

prereqs() {
	local nvcc cap gpu
	PRE_LOG=$OUTDIR/$1
	: >"$PRE_LOG"
	nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
	if [ -n "$nvcc" ]; then
		CUDA_HOME=$(dirname "$(dirname "$nvcc")")
		export PATH=$CUDA_HOME/bin:$PATH
		pre nvcc ok "$nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
	else
		pre nvcc MISSING "no nvcc on the PATH or in /usr/local/cuda/bin"
	fi
	if ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcublas.so* >/dev/null 2>&1 || ldconfig -p 2>/dev/null | grep -q libcublas.so; then
		pre cuBLAS ok "$(ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcublas.so* 2>/dev/null | head -1)"
	else
		pre cuBLAS MISSING "no libcublas.so in ${CUDA_HOME:-/usr/local/cuda}/lib64 or ldconfig"
	fi
	ARCH=90
	if [ $FAKE = 1 ]; then
		pre GPU note "dry run: none used (fake device); building for sm_90 as on an H200"
	elif ! command -v nvidia-smi >/dev/null; then
		pre nvidia-smi MISSING "not found: is this the device machine?"
	elif ! gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1) ||
		[ -z "$gpu" ]; then
		pre GPU MISSING "nvidia-smi finds none: $gpu"
	else
		cap=$(echo "$gpu" | head -1 | cut -d, -f2 | tr -d ' .')
		ARCH=${cap:-90}
		pre GPU ok "$(echo "$gpu" | head -1) -> CUDA_ARCH=$ARCH"
	fi
	for t in cc make python3; do
		command -v $t >/dev/null && pre "$t" ok "$(command -v $t)" || pre "$t" MISSING "not found"
	done
	if [ $USE_STAGED = 0 ] && libs_link; then
		pre "ncursesw/readline/yaml/microhttpd/curl" ok "headers and libraries installed"
	elif use_staged_debs && libs_link; then
		pre "ncursesw/readline/yaml/microhttpd/curl" ok "from the staged .debs ($STAGE/sysroot)"
	else
		pre "ncursesw/readline/yaml/microhttpd/curl" MISSING "no headers, and no usable .debs in $STAGE/debs (run --stage here)"
	fi
	SHARED=$STAGE/shared
	for f in models/stories260K.gguf models/vocab/ggml-vocab-llama-spm.gguf models/vocab/ggml-vocab-llama3.gguf \
		tools/gen_random_llama_gguf.py; do
		[ -f "$SHARED/$f" ] && pre "staged ${f##*/}" ok "$SHARED/$f" ||
			pre "staged ${f##*/}" MISSING "run tools/gpu_check.sh --stage here, carry $STAGE"
	done
	pre disk note "$(df -h . | awk 'NR == 2 {print $4 " free here"}'); models: $MODELS"
	pre cores note "$J"
	# DEPS_OK=1: the checks above stand for make's package check (which
	# would call apt-get, and the machine has no network)
	MAKEVARS=(CUDA=1 CUDA_ARCH="$ARCH" DEPS_OK=1 SHARED="$SHARED" MODEL="$SHARED/models/stories260K.gguf"
		FAKE_DEVICE="$FAKE")
	if [ $PRE_MISSING = 1 ]; then
		echo "gpu_check: prerequisites missing (above); nothing built"
		SUMMARY+=("$(printf '| %-44s | %-7s | %5s | %5s |' prerequisites MISSING - -)")
		FAILED=1
		summary | tee -a "$PRE_LOG"
		exit 2
	fi
}

# Where the 8B models go: /dev/shm when it has the room (no disk writes),
# else build/models.
pick_models_dir() {
	MODELS=build/models
	local shm
	shm=$(df -BG --output=avail /dev/shm 2>/dev/null | tail -1 | tr -dc 0-9)
	[ $FAKE = 0 ] && [ -n "$shm" ] && ((shm > 30)) && MODELS=/dev/shm/pagechat-gpu
	mkdir -p "$MODELS"
}

# ---- the calls ----

BUILD=build/cuda
CUDA_TEST_BINS=($BUILD/tests/cuda/test_cuda_ops $BUILD/tests/cuda/test_cuda_model $BUILD/tests/cuda/test_cuda_deq)

# Prerequisites, the build for this GPU, test-cuda, recorded steps, the CLI.
call1() {
	local dev=cuda log=$OUTDIR/build.log tlog=$OUTDIR/test-cuda.log
	[ $FAKE = 1 ] && dev=fake
	prereqs prereq.txt
	run_step "build (CUDA_ARCH=$ARCH, $J jobs)" 300 "$log" \
		make -j"$J" "${MAKEVARS[@]}" all tools "${CUDA_TEST_BINS[@]}"
	SUMMARY+=("$(printf '| %-44s | %-7s | %5s | %5s |' "  warnings in the build (not fatal here)" \
		"$(grep -c 'warning:' "$log")" - -)")
	run_step "test models (python, quantize)" 90 "$log" make -j"$J" "${MAKEVARS[@]}" test-models \
		build/models/rand-256x4-q4_k.gguf build/models/rand-256x4-q6_k.gguf
	run_step "make test-cuda$([ $FAKE = 1 ] && echo ' (fake device)')" 150 "$tlog" make "${MAKEVARS[@]}" test-cuda
	local tc=$?
	run_step "test_cuda_model, steps recorded (graphs)" 90 "$tlog" env PAGECHAT_CUDA_GRAPH=1 \
		PAGECHAT_SHARED="$SHARED" PAGECHAT_FAKE_DEVICE=$FAKE $BUILD/tests/cuda/test_cuda_model
	run_step "greedy stories260K: CPU vs $dev (CLI)" 45 "$OUTDIR/greedy.txt" bash -c '
		p="Once upon a time"; m=$1/models/stories260K.gguf
		build/pagechat generate --device cpu -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-cpu.ids &&
		build/pagechat generate --device "$2" -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-dev.ids &&
		cmp /tmp/pagechat-cpu.ids /tmp/pagechat-dev.ids && echo "same 200 tokens"' _ "$SHARED" "$dev"
	run_step "greedy stories260K: CPU vs $dev, -ngl 3 of 5" 45 "$OUTDIR/greedy.txt" bash -c '
		p="Once upon a time"; m=$1/models/stories260K.gguf
		build/pagechat generate --device cpu -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-cpu.ids &&
		build/pagechat generate --device "$2" -ngl 3 -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-dev.ids &&
		cmp /tmp/pagechat-cpu.ids /tmp/pagechat-dev.ids && echo "same 200 tokens, partial offload"' _ "$SHARED" "$dev"
	if [ $tc != 0 ] && [ $FAKE = 0 ]; then
		# what failed, named: a wait after every kernel, then the memory checker
		run_step "test_cuda_ops, a wait after each kernel" 60 "$OUTDIR/debug.log" \
			env PAGECHAT_CUDA_SYNC=1 $BUILD/tests/cuda/test_cuda_ops
		command -v compute-sanitizer >/dev/null &&
			run_step "compute-sanitizer memcheck test_cuda_ops" 150 "$OUTDIR/debug.log" \
				compute-sanitizer --tool memcheck $BUILD/tests/cuda/test_cuda_ops
	fi
	grep -h ' passed, [0-9]* failed$' "$tlog" | tail -4
}

# One bench run: tg at batch 1 (and the rest) on dev, into its file.
bench() {
	local t=$1 graphs=$2 out=$OUTDIR/bench-$1.txt dev=cuda args
	args=(-p 512 -n 128 -r 3 --batch 1,16 --peak-gbs "$PEAK")
	[ "$graphs" = 1 ] && args=(-p 0 -n 128 -r 3 --batch 1 --peak-gbs "$PEAK")
	[ $FAKE = 1 ] && dev=fake args=(-p 32 -n 16 -r 1 --batch 1,4 --peak-gbs 20)
	[ $FAKE = 1 ] && [ "$graphs" = 1 ] && args=(-p 0 -n 16 -r 1 --batch 1 --peak-gbs 20)
	run_step "bench 8B $t$([ "$graphs" = 1 ] && echo ', steps recorded')" "$3" "$out" \
		env PAGECHAT_CUDA_GRAPH="$graphs" build/pagechat bench --device $dev -m "$MODELS/rand-8b-$t.gguf" "${args[@]}"
}

# 8B-shaped models, their logits against the CPU, the decode benchmarks.
call2() {
	local gen=$BUILD/tools/gen_rand_gguf shape=() glog=$OUTDIR/gen.log dev=cuda cap=4GiB ngl=16
	# the dry run: a small fake device (its bandwidth probe then skipped), 2 of the stand-in's 4 layers
	[ $FAKE = 1 ] && dev=fake cap=340MiB ngl=2 shape=(--dim 1024 --layers 4 --heads 8 --kv-heads 2 --ffn 2816 --vocab 32000)
	pick_models_dir
	prereqs setup.txt
	# seconds when the machine kept call 1's build; a fresh one builds again
	run_step "build (pagechat, tools, test_cuda_model)" 200 "$OUTDIR/setup.txt" \
		make -j"$J" "${MAKEVARS[@]}" build/pagechat tools $BUILD/tests/cuda/test_cuda_model
	run_step "generate 8B Q4_K ($J threads)" 90 "$glog" $gen --type q4_k "${shape[@]}" --out "$MODELS/rand-8b-q4_k.gguf"
	bench q4_k 0 75
	bench q4_k 1 40
	run_step "8B Q4_K logits: $dev vs CPU" 90 "$OUTDIR/logits.log" env PAGECHAT_FAKE_DEVICE=$FAKE \
		$BUILD/tests/cuda/test_cuda_model --big "$MODELS/rand-8b-q4_k.gguf"
	run_step "generate 8B F16 ($J threads)" 120 "$glog" $gen --type f16 "${shape[@]}" --out "$MODELS/rand-8b-f16.gguf"
	bench f16 0 90
	bench f16 1 50
	run_step "info: the memory plan on $dev" 20 "$OUTDIR/setup.txt" \
		build/pagechat info --device $dev "$MODELS/rand-8b-q4_k.gguf"
	# partial offload: half the layers on the GPU, then as many as a cap
	# allows (the bandwidth limit bench prints is the device's, not the split's)
	run_step "partial offload: 8B Q4_K, -ngl $ngl" 60 "$OUTDIR/bench-partial.txt" \
		build/pagechat bench --device $dev -ngl $ngl --device-mem $cap -m "$MODELS/rand-8b-q4_k.gguf" \
		-p 128 -n 32 -r 1 --batch 1
	run_step "partial offload: 8B Q4_K, auto, $cap" 60 "$OUTDIR/bench-partial.txt" \
		build/pagechat bench --device $dev --device-mem $cap -m "$MODELS/rand-8b-q4_k.gguf" -p 128 -n 32 -r 1 --batch 1
	run_step "plan: a 70B shape on 24 GiB (no weights)" 20 "$OUTDIR/setup.txt" bash -c '
		python3 tools/gen_shape_gguf.py --dim 8192 --layers 80 --heads 64 --kv-heads 8 --ffn 28672 \
			--out "$1/shape-70b.gguf" && build/pagechat info --device-mem 24GiB "$1/shape-70b.gguf" | tail -4;
		rc=$?; rm -f "$1/shape-70b.gguf"; exit $rc' _ "$MODELS"
	echo "decode at batch 1 (goal on an H200: Q4_K >= 80% of the bandwidth limit, F16 >= 250 t/s):"
	grep -h 'tg128\|tg16 \|tg32 \|^model\|steps recorded\|layers on' "$OUTDIR"/bench-*.txt
	[ "$MODELS" = /dev/shm/pagechat-gpu ] && rm -rf "$MODELS"
}

# ---- staging (here) ----

stage() {
	local src=${SHARED_SRC:-../shared} size
	mkdir -p "$STAGE/shared/models/vocab" "$STAGE/shared/tools" "$STAGE/debs"
	for f in models/stories260K.gguf models/vocab/ggml-vocab-llama-spm.gguf models/vocab/ggml-vocab-llama3.gguf \
		tools/gen_random_llama_gguf.py; do
		cp "$src/$f" "$STAGE/shared/$f" || { echo "gpu_check: cannot stage $src/$f"; exit 2; }
	done
	# the build's libraries (Debian 12 packages: their libraries need glibc
	# 2.34 or later), for an image without the -dev packages
	(cd "$STAGE/debs" && apt-get download libncurses-dev libncursesw6 libtinfo6 libreadline-dev libreadline8 \
		libyaml-dev libyaml-0-2 libmicrohttpd-dev libmicrohttpd12 libcurl4-openssl-dev libcurl4 \
		libnghttp2-14 libpsl5 librtmp1 libssh2-1 libbrotli1 libgnutls30 libidn2-0 libunistring2 \
		libnettle8 libhogweed6 libp11-kit0 libtasn1-6 >/dev/null 2>&1) ||
		echo "gpu_check: note: apt-get download failed; the device machine must have the -dev packages"
	size=$( (git ls-files -z -co --exclude-standard; find "$STAGE" -type f -print0) | du -cb --files0-from=- | tail -1 | cut -f1)
	echo "staged into $STAGE/: $(du -sh "$STAGE" | cut -f1) ($(ls "$STAGE"/debs | wc -l) .debs);" \
		"the working tree that travels: $((size >> 20)) MiB of the tool's 64"
	echo "device calls: README.md, section GPU"
}

# ---- the dry run (here) ----

dry_run() {
	local tmp total=0 rc=0
	[ -d "$STAGE/shared" ] || { echo "gpu_check: run tools/gpu_check.sh --stage first"; exit 2; }
	tmp=$(mktemp -d /tmp/pagechat-gpu-dry.XXXXXX)
	mkdir -p "$tmp/repo" "$OUTDIR"
	# the working tree as the device tool sends it: tracked and untracked,
	# not ignored files, plus the carried gpu_stage; no ../shared beside it
	git ls-files -z -co --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$tmp/repo"
	cp -a "$STAGE" "$tmp/repo/"
	rm -rf "$tmp/repo/$STAGE/sysroot"
	for c in 1 2; do
		mkdir -p "$tmp/out$c"
		echo "=== dry run, call $c (in $tmp/repo, logs in $tmp/out$c)"
		(cd "$tmp/repo" && tools/gpu_check.sh --call $c --fake --use-staged-debs --budget "$BUDGET" \
			--out "$tmp/out$c") | tee "$OUTDIR/dry-run-call$c.txt" | tail -n 25
		((rc |= $?))
		ls "$tmp/out$c" | wc -l | xargs printf 'call %s wrote %s files (the tool brings back 8 at most)\n' "$c"
	done
	echo "dry run: logs of both calls in $OUTDIR/dry-run-call{1,2}.txt$([ $KEEP = 1 ] && echo "; the copy: $tmp")"
	grep -h '^call [12]: [0-9]* s of a' "$OUTDIR"/dry-run-call[12].txt |
		sed "s/\$/ (here: $J cores, no GPU, 110M-parameter stand-ins for the 8B models)/"
	echo "planned device calls: each ends by its --budget of $BUDGET s; run them with timeout_s 460 (README, GPU)"
	[ $KEEP = 1 ] || rm -rf "$tmp"
	exit $((rc != 0))
}

case $MODE in
stage) stage ;;
dry) dry_run ;;
call)
	mkdir -p "$OUTDIR"
	MODELS=build/models
	case $CALL in
	1) call1 ;;
	2) call2 ;;
	*) echo "gpu_check: --call 1 or --call 2"; exit 2 ;;
	esac
	summary | tee -a "$OUTDIR/summary.txt"
	exit $FAILED
	;;
*) sed -n '2,30p' "$0"; exit 2 ;;
esac
