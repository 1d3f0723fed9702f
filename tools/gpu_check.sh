#!/usr/bin/env bash
# tools/gpu_check.sh: what a lent GPU machine must run (issues #26, #11, #41),
# as ONE call of the device tool that ends well inside its 600 s limit.
#
#   tools/gpu_check.sh --stage    here (make gpu-stage): gathers what the
#       device machine lacks into gpu_stage/ (ignored by git; name it in the
#       tool's carry): the stories260K model and the model generator from
#       ../shared, and .debs of the build's libraries (ncursesw, readline,
#       libyaml; libmicrohttpd and libcurl with every library they load while
#       the build has no HTTP=0) in case the image has no headers for them;
#       checks that every staged library finds what it loads
#   tools/gpu_check.sh --call all there: prerequisites (each library probed on
#       its own), the CUDA build for the GPU's own architecture, make test-cuda
#       (every op, whole models, every partial split; the models it reads and
#       no others), the model tests with recorded steps off, the SASS budget,
#       greedy stories260K on the CLI (all layers and 3 of 5 on the GPU); then
#       8B-shaped random models (Q4_K, F16) made there, the Q4_K prefill and
#       decode logits against the CPU, decode at depth 0 and 4096 with and
#       without recorded steps, prefill, batched decode x16, ncu on the
#       matrix-vector and attention kernels, partial offload, the plan for a
#       70B shape on 24 GiB; every figure in one table (table.md)
#       (--call 1: the tests alone; --call 2: the measurements alone)
#   tools/gpu_check.sh --dry-run  here (make gpu-dry-run): --call all on a copy
#       of the checkout as the tool sends it (no ../shared), within the same
#       budget, with the fake device (CPU kernels behind host "device" buffers)
#       where the GPU would be and small stand-in models, timing every step
#
# Options: --out DIR (default $OUT where the device tool sets it, else
# build/gpu_check), --peak-gbs G (default 4800, an H200's HBM3e), --budget S
# (seconds the call may take, default 480: a step's time limit shrinks to what
# is left, a step with under 5 s left is skipped; give the tool a timeout_s of
# 560), --fake (a call on the fake device; --dry-run passes it), --keep
# (--dry-run keeps its copy). Every log and figure goes to the output folder,
# at most 8 files (what the tool brings back); the call ends with the table of
# figures and a table of its steps, their status and seconds. Exit status: 0
# when every check passed, 1 when one failed, 2 when a prerequisite is missing.
# The build leaves out the HTTP server and client (HTTP=0) once the Makefile
# has that switch (GPU_CHECK_HTTP=0|1 overrides): the check uses neither.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2

STAGE=gpu_stage
MODE="" CALL="" FAKE=0 PEAK=4800 BUDGET=480 KEEP=0 USE_STAGED=0
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
	*) sed -n '2,40p' "$0"; exit 2 ;;
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
		SUMMARY+=("$(printf '| %-48s | %-7s | %5s | %5s |' "$name" skipped - "$2")")
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
	SUMMARY+=("$(printf '| %-48s | %-7s | %5d | %5d |' "$name" "$st" "$dt" "$limit")")
	return $rc
}

note_row() {
	SUMMARY+=("$(printf '| %-48s | %-7s | %5s | %5s |' "$1" "$2" - -)")
}

summary() {
	printf '\n| %-48s | %-7s | %5s | %5s |\n' "step (call ${CALL:-?}$([ $FAKE = 1 ] && echo ', fake device'))" status s limit
	printf '|%s|%s|%s|%s|\n' "--------------------------------------------------" ---------- ------- -------
	printf '%s\n' "${SUMMARY[@]}"
	printf 'call %s: %d s of a %d s budget; %s\n' "${CALL:-?}" "$SECONDS" "$BUDGET" \
		"$([ $FAILED = 0 ] && echo 'every check passed' || echo 'SOME CHECKS FAILED (see the logs)')"
}

# ---- prerequisites ----

# ok|MISSING|note lines to $PRE_LOG; MISSING anything the call cannot do without.
PRE_MISSING=0
pre() {
	printf '%-22s %-8s %s\n' "$1" "$2" "$3" | tee -a "$PRE_LOG"
	[ "$2" = MISSING ] && PRE_MISSING=1
	return 0
}

# The build's libraries: name, header, -l name, a call that needs the library
# at run time. The HTTP ones only while the build cannot leave them out.
LIBS=("ncursesw|ncurses.h|ncursesw|curses_version()"
	"readline|readline/readline.h|readline|rl_library_version"
	"yaml|yaml.h|yaml|yaml_get_version_string()")
HTTP_LIBS=("microhttpd|microhttpd.h|microhttpd|MHD_get_version()"
	"curl|curl/curl.h|curl|curl_version()")

# HTTP=0 for make when the Makefile has the switch (it uses $(HTTP)), or as
# GPU_CHECK_HTTP says; the HTTP libraries are then neither probed nor needed.
http_vars() {
	local want=${GPU_CHECK_HTTP:-auto}
	if [ "$want" = auto ]; then
		grep -q '\$(HTTP)' Makefile && want=0 || want=1
	fi
	HTTP_VARS=()
	[ "$want" = 0 ] && HTTP_VARS=(HTTP=0)
	[ "$want" = 0 ]
}

# Unpacks the staged .debs into gpu_stage/sysroot and points the build at it
# (its libraries before the system's, found at run time through the rpath).
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
	export CPPFLAGS="-I$root/usr/include" LDFLAGS="-L$lib -Wl,-rpath,$lib -Wl,-rpath-link,$lib"
}

# probe_lib "name|header|lib|expr": compiles, links and runs a call into the
# library with the flags exported so far; prints the first error line.
probe_lib() {
	local name hdr lib expr out bin=/tmp/pagechat-probe-$$
	IFS='|' read -r name hdr lib expr <<<"$1"
	rm -f $bin
	if ! out=$(printf '#include <stdio.h>\n#include <%s>\nint main(void) { return !(%s); }\n' "$hdr" "$expr" |
		cc ${CPPFLAGS:-} -x c - ${LDFLAGS:-} -o $bin -l"$lib" 2>&1); then
		echo "$out" | grep -m1 -E 'error|cannot|undefined' || echo "$out" | head -1
		return 1
	fi
	out=$($bin 2>&1) || { echo "${out:-exit status $?}" | head -1; rm -f $bin; return 1; }
	rm -f $bin
}

# Each library on its own: the system's, else (any missing) the staged .debs,
# then every library again with their flags.
probe_libs() {
	local l why missing=() libs=("${LIBS[@]}")
	http_vars || libs+=("${HTTP_LIBS[@]}")
	if [ ${#HTTP_VARS[@]} -gt 0 ]; then
		pre "microhttpd, curl" note "not needed: the build leaves out HTTP (HTTP=0)"
	fi
	for l in "${libs[@]}"; do
		[ $USE_STAGED = 0 ] && probe_lib "$l" >/dev/null || missing+=("${l%%|*}")
	done
	if [ ${#missing[@]} = 0 ]; then
		pre libraries ok "installed: $(printf '%s ' "${libs[@]%%|*}")"
		return
	fi
	if ! use_staged_debs; then
		pre libraries MISSING "no headers for ${missing[*]}, and no usable .debs in $STAGE/debs (run make gpu-stage here)"
		return
	fi
	for l in "${libs[@]}"; do
		if why=$(probe_lib "$l"); then
			pre "${l%%|*}" ok "from the staged .debs ($STAGE/sysroot)"
		else
			pre "${l%%|*}" MISSING "staged .debs: $why"
		fi
	done
}

prereqs() {
	local nvcc cap gpu f
	PRE_LOG=$OUTDIR/setup.txt
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
	probe_libs
	SHARED=$STAGE/shared
	for f in models/stories260K.gguf tools/gen_random_llama_gguf.py; do
		[ -f "$SHARED/$f" ] && pre "staged ${f##*/}" ok "$SHARED/$f" ||
			pre "staged ${f##*/}" MISSING "run make gpu-stage here, carry $STAGE"
	done
	CUOBJDUMP=$(command -v cuobjdump || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/cuobjdump 2>/dev/null)
	pre cuobjdump note "${CUOBJDUMP:-none: make test-cuda installs it from PyPI for its SASS budget test}"
	NCU=$(command -v ncu || ls "${CUDA_HOME:-/usr/local/cuda}"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	pre ncu note "${NCU:-none: no kernel profile}"
	pre disk note "$(df -h . | awk 'NR == 2 {print $4 " free here"}'); models: $MODELS"
	pre cores note "$J"
	# DEPS_OK=1: the checks above stand for make's package check (which
	# would call apt-get, and the machine has no network)
	MAKEVARS=(CUDA=1 CUDA_ARCH="$ARCH" DEPS_OK=1 SHARED="$SHARED" MODEL="$SHARED/models/stories260K.gguf"
		FAKE_DEVICE="$FAKE" "${HTTP_VARS[@]}")
	if [ $PRE_MISSING = 1 ]; then
		echo "gpu_check: prerequisites missing (above); nothing built"
		SUMMARY+=("$(printf '| %-48s | %-7s | %5s | %5s |' prerequisites MISSING - -)")
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

# ---- the tests ----

BUILD=build/cuda
CUDA_TEST_BINS=($BUILD/tests/cuda/test_cuda_ops $BUILD/tests/cuda/test_cuda_model $BUILD/tests/cuda/test_cuda_deq)

build() {
	run_step "build (CUDA_ARCH=$ARCH, $J jobs)" 300 "$OUTDIR/build.log" \
		make -j"$J" "${MAKEVARS[@]}" build/pagechat $BUILD/tools/gen_rand_gguf "${CUDA_TEST_BINS[@]}"
	note_row "  warnings in the build (not fatal here)" "$(grep -c 'warning:' "$OUTDIR/build.log")"
}

# test-cuda (its models first), steps unrecorded, the SASS budget, the CLI.
tests() {
	local dev=cuda tlog=$OUTDIR/tests.log
	[ $FAKE = 1 ] && dev=fake
	run_step "make test-cuda$([ $FAKE = 1 ] && echo ' (fake device)')" 200 "$tlog" make -j"$J" "${MAKEVARS[@]}" test-cuda
	local tc=$?
	run_step "test_cuda_model, steps not recorded" 90 "$tlog" env PAGECHAT_CUDA_GRAPH=0 \
		PAGECHAT_SHARED="$SHARED" PAGECHAT_FAKE_DEVICE=$FAKE $BUILD/tests/cuda/test_cuda_model
	run_step "greedy stories260K: CPU vs $dev (CLI)" 45 "$tlog" bash -c '
		p="Once upon a time"; m=$1/models/stories260K.gguf
		build/pagechat generate --device cpu -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-cpu.ids &&
		build/pagechat generate --device "$2" -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-dev.ids &&
		cmp /tmp/pagechat-cpu.ids /tmp/pagechat-dev.ids && echo "same 200 tokens"' _ "$SHARED" "$dev"
	run_step "greedy stories260K: CPU vs $dev, -ngl 3 of 5" 45 "$tlog" bash -c '
		p="Once upon a time"; m=$1/models/stories260K.gguf
		build/pagechat generate --device cpu -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-cpu.ids &&
		build/pagechat generate --device "$2" -ngl 3 -m "$m" -p "$p" --temp 0 -n 200 --ids >/tmp/pagechat-dev.ids &&
		cmp /tmp/pagechat-cpu.ids /tmp/pagechat-dev.ids && echo "same 200 tokens, partial offload"' _ "$SHARED" "$dev"
	if [ $tc != 0 ] && [ $FAKE = 0 ]; then
		# what failed, named: a wait after every kernel, then the memory checker
		run_step "test_cuda_ops, a wait after each kernel" 60 "$tlog" \
			env PAGECHAT_CUDA_SYNC=1 $BUILD/tests/cuda/test_cuda_ops
		command -v compute-sanitizer >/dev/null &&
			run_step "compute-sanitizer memcheck test_cuda_ops" 120 "$tlog" \
				compute-sanitizer --tool memcheck $BUILD/tests/cuda/test_cuda_ops
	fi
	grep -h ' passed, [0-9]* failed$' "$tlog" | tail -5
}

# ---- the measurements ----

# bench NAME LIMIT GRAPHS MODEL ARGS...: one pagechat bench --json run (steps
# recorded when GRAPHS is 1), its JSON line (tagged with NAME) appended to
# bench.jsonl, its stderr to bench.log.
bench() {
	local name=$1 limit=$2 graphs=$3 model=$4 dev=cuda
	shift 4
	[ $FAKE = 1 ] && dev=fake
	run_step "bench: $name" "$limit" "$OUTDIR/bench.log" env PAGECHAT_CUDA_GRAPH="$graphs" bash -c '
		name=$1 out=$2; shift 2
		j=$("$@" 2>/tmp/pagechat-bench.err); rc=$?
		cat /tmp/pagechat-bench.err >&2
		((rc == 0)) || exit $rc
		plan=$(grep -m1 -o "[0-9]* of [0-9]* layers on [a-z]*[^:]*" /tmp/pagechat-bench.err | tr -d "\"\\\\")
		printf "%s\n" "$j"
		printf "{\"name\": \"%s\", \"plan\": \"%s\", \"run\": %s}\n" "$name" "$plan" "$j" >>"$out/bench.jsonl"' \
		_ "$name" "$OUTDIR" build/pagechat bench --json --device $dev -m "$model" --peak-gbs "$PEAK" "$@"
}

# ncu on a few decode steps: the matrix-vector and attention kernels' time and
# DRAM throughput, one line each (table.md).
profile() {
	local model=$1
	if [ -z "$NCU" ] || [ $FAKE = 1 ]; then
		echo "ncu: none on this machine$([ $FAKE = 1 ] && echo ' (fake device: no CUDA kernels)')" >"$OUTDIR/ncu.txt"
		note_row "ncu (matvec, attention)" none
		return
	fi
	run_step "ncu: matvec and attention kernels" 90 "$OUTDIR/ncu.txt" env PAGECHAT_CUDA_GRAPH=0 \
		"$NCU" --clock-control none --launch-skip 300 --launch-count 6 -k 'regex:mv_q|attn_dec' --csv \
		--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
		build/pagechat bench --device cuda -m "$model" -p 0 -n 4 -r 1 --batch 1 -d 1024
}

# The measurements' table (table.md): one row per bench test, then ncu.
table() {
	python3 - "$OUTDIR" "$PEAK" >"$OUTDIR/table.md" <<-'EOF' || echo "table: python3 failed" >>"$OUTDIR/table.md"
	import json, sys, csv, os
	out, peak = sys.argv[1], float(sys.argv[2])
	rows = []
	try:
	    lines = open(os.path.join(out, "bench.jsonl")).read().splitlines()
	except OSError:
	    lines = []
	print("| run | test | t/s | limit t/s | % of HBM limit | bytes/token MB | split |")
	print("|---|---|---|---|---|---|---|")
	for ln in lines:
	    r = json.loads(ln); j = r["run"]
	    for t in j["tests"]:
	        lim = t.get("limit_tps", 0)
	        frac = "%.1f%%" % (100 * t["of_limit"]) if "of_limit" in t and t["test"].startswith("tg") else "-"
	        print("| %s | %s | %.1f | %s | %s | %.1f | %s |" % (r["name"], t["test"], t["tps_mean"],
	              "%.0f" % lim if lim and t["test"].startswith("tg") else "-", frac, j["bytes_per_token"] / 1e6,
	              r.get("plan", "") or "-"))
	print("\nHBM limit: %.0f GB/s (--peak-gbs) / bytes read per token (weights + the KV attended)" % peak)
	try:
	    rows = list(csv.reader(l for l in open(os.path.join(out, "ncu.txt")) if l.startswith('"')))
	except OSError:
	    rows = []
	if len(rows) > 1:
	    h = rows[0]; k, m, v = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
	    u = h.index("Metric Unit")
	    seen = {}
	    for x in rows[1:]:
	        name = x[k].split("(")[0].split("<")[0]
	        seen.setdefault(name, {})[x[m]] = x[v] + " " + x[u]
	    print("\n| ncu kernel | time | DRAM read | DRAM throughput % of peak |")
	    print("|---|---|---|---|")
	    for name, d in seen.items():
	        print("| %s | %s | %s | %s |" % (name, d.get("gpu__time_duration.sum", "-"),
	              d.get("dram__bytes_read.sum", "-"), d.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", "-")))
	else:
	    print("\nncu: " + (open(os.path.join(out, "ncu.txt")).read().strip()[:300] if os.path.exists(os.path.join(out, "ncu.txt")) else "not run"))
	EOF
	cat "$OUTDIR/table.md"
}

# 8B-shaped models (stand-ins on the fake device), their logits against the
# CPU, decode at two depths with and without recorded steps, prefill,
# batched decode, ncu, partial offload, the 70B plan.
measure() {
	local gen=$BUILD/tools/gen_rand_gguf shape=() glog=$OUTDIR/setup.txt cap=4GiB ngl=16 d=4096 n=128 p=512
	local q4 f16
	# the dry run: a small fake device, 2 of the stand-in's 4 layers, shorter runs
	if [ $FAKE = 1 ]; then
		cap=340MiB ngl=2 d=256 n=16 p=64 PEAK=20
		shape=(--dim 1024 --layers 4 --heads 8 --kv-heads 2 --ffn 2816 --vocab 32000)
	fi
	q4=$MODELS/rand-8b-q4_k.gguf f16=$MODELS/rand-8b-f16.gguf
	run_step "generate 8B Q4_K ($J threads)" 90 "$glog" $gen --type q4_k "${shape[@]}" --out "$q4"
	bench "Q4_K" 70 1 "$q4" -p $p -n $n -r 3 --batch 1,16
	bench "Q4_K @d$d" 60 1 "$q4" -p 0 -n $n -r 2 --batch 1 -d $d
	bench "Q4_K, steps not recorded" 40 0 "$q4" -p 0 -n $n -r 2 --batch 1
	run_step "8B Q4_K logits: prefill and decode vs CPU" 90 "$OUTDIR/tests.log" env PAGECHAT_FAKE_DEVICE=$FAKE \
		$BUILD/tests/cuda/test_cuda_model --big "$q4"
	profile "$q4"
	# partial offload: half the layers on the GPU, then as many as a cap
	# allows (the HBM limit is the device's, not the split's; the plan line
	# "N of M layers on cuda" is in bench.log)
	bench "Q4_K partial, -ngl $ngl" 50 1 "$q4" -ngl $ngl --device-mem $cap -p 128 -n 32 -r 1 --batch 1
	bench "Q4_K partial, auto on $cap" 50 1 "$q4" --device-mem $cap -p 128 -n 32 -r 1 --batch 1
	[ "$MODELS" = /dev/shm/pagechat-gpu ] && rm -f "$q4"
	run_step "generate 8B F16 ($J threads)" 100 "$glog" $gen --type f16 "${shape[@]}" --out "$f16"
	bench "F16" 70 1 "$f16" -p $p -n $n -r 3 --batch 1
	bench "F16 @d$d" 50 1 "$f16" -p 0 -n $n -r 2 --batch 1 -d $d
	[ "$MODELS" = /dev/shm/pagechat-gpu ] && rm -f "$f16"
	run_step "plan: a 70B shape on 24 GiB (no weights)" 20 "$OUTDIR/setup.txt" bash -c '
		python3 tools/gen_shape_gguf.py --dim 8192 --layers 80 --heads 64 --kv-heads 8 --ffn 28672 \
			--out "$1/shape-70b.gguf" && build/pagechat info --device-mem 24GiB "$1/shape-70b.gguf" | tail -4;
		rc=$?; rm -f "$1/shape-70b.gguf"; exit $rc' _ "$MODELS"
	grep -h 'layers on' "$OUTDIR/bench.log" | sort -u
	table
	echo "goals on an H200: 8B Q4_K decode >= 60% of the HBM limit (aim 80%), F16 >= 75%"
}

# ---- staging (here) ----

# The .debs: the libraries' -dev packages and what their libraries load
# beyond glibc (Debian 12, glibc 2.36; an image with an older glibc cannot use them).
STAGE_DEBS=(libncurses-dev libncursesw6 libtinfo6 libreadline-dev libreadline8 libyaml-dev libyaml-0-2
	libmicrohttpd-dev libmicrohttpd12 libcurl4-openssl-dev libcurl4
	libnghttp2-14 libpsl5 librtmp1 libssh2-1 libbrotli1 libgnutls30 libidn2-0 libunistring2
	libnettle8 libhogweed6 libgmp10 libp11-kit0 libffi8 libtasn1-6 libldap-2.5-0 libsasl2-2
	libsasl2-modules-db libdb5.3 libssl3 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0
	libcom-err2 libkeyutils1 libzstd1 zlib1g)

# Every library in the staged sysroot finds each library it loads in the
# sysroot or among glibc's and the compiler's own; prints what it lacks.
stage_closure() {
	local root=$1 lib need missing=0
	for lib in $(find "$root" -name '*.so*' -type f); do
		for need in $(readelf -d "$lib" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
			case $need in
			libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | ld-linux* | libgcc_s.so.*) ;;
			*) [ -n "$(find "$root" -name "$need" 2>/dev/null | head -1)" ] ||
				{ echo "gpu_check: staged ${lib##*/} loads $need, which is not staged"; missing=1; } ;;
			esac
		done
	done
	return $missing
}

stage() {
	local src=${SHARED_SRC:-../shared} size t
	rm -rf "$STAGE"
	mkdir -p "$STAGE/shared/models" "$STAGE/shared/tools" "$STAGE/debs"
	for f in models/stories260K.gguf tools/gen_random_llama_gguf.py; do
		cp "$src/$f" "$STAGE/shared/$f" || { echo "gpu_check: cannot stage $src/$f"; exit 2; }
	done
	if (cd "$STAGE/debs" && apt-get download "${STAGE_DEBS[@]}" >/dev/null 2>&1); then
		t=$(mktemp -d)
		for d in "$STAGE"/debs/*.deb; do dpkg -x "$d" "$t"; done
		stage_closure "$t" || { rm -rf "$t"; echo "gpu_check: add the packages named above to STAGE_DEBS"; exit 1; }
		rm -rf "$t"
	else
		echo "gpu_check: note: apt-get download failed; the device machine must have the -dev packages"
	fi
	size=$( (git ls-files -z -co --exclude-standard; find "$STAGE" -type f -print0) | du -cb --files0-from=- | tail -1 | cut -f1)
	echo "staged into $STAGE/: $(du -sh "$STAGE" | cut -f1) ($(ls "$STAGE"/debs | wc -l) .debs, each library's" \
		"needs staged too); the working tree that travels: $((size >> 20)) MiB of the tool's 64"
	((size < 64 << 20)) || { echo "gpu_check: over the device tool's 64 MiB"; exit 1; }
	echo "device call: README.md, section GPU"
}

# ---- the dry run (here) ----

dry_run() {
	local tmp rc
	[ -d "$STAGE/shared" ] || { echo "gpu_check: run make gpu-stage first"; exit 2; }
	tmp=$(mktemp -d /tmp/pagechat-gpu-dry.XXXXXX)
	mkdir -p "$tmp/repo" "$tmp/out" "$OUTDIR"
	# the working tree as the device tool sends it: tracked and untracked,
	# not ignored files, plus the carried gpu_stage; no ../shared beside it
	git ls-files -z -co --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$tmp/repo"
	cp -a "$STAGE" "$tmp/repo/"
	rm -rf "$tmp/repo/$STAGE/sysroot"
	echo "=== dry run of --call all (in $tmp/repo, logs in $tmp/out, budget $BUDGET s)"
	(cd "$tmp/repo" && tools/gpu_check.sh --call all --fake --use-staged-debs --budget "$BUDGET" \
		--out "$tmp/out") >"$OUTDIR/dry-run.txt" 2>&1
	rc=$?
	tail -n 45 "$OUTDIR/dry-run.txt"
	grep -h ': FAIL: ' "$OUTDIR/dry-run.txt" | sort -u | head -10
	ls "$tmp/out" | wc -l | xargs printf 'the call wrote %s files (the tool brings back 8 at most)\n'
	(($(ls "$tmp/out" | wc -l) <= 8)) || rc=1
	echo "dry run: its log in $OUTDIR/dry-run.txt$([ $KEEP = 1 ] && echo "; the copy: $tmp")"
	grep -h '^call all: [0-9]* s of a' "$OUTDIR/dry-run.txt" |
		sed "s/\$/ (here: $J cores, no GPU, small stand-ins for the 8B models)/"
	echo "device call: run(command=\"tools/gpu_check.sh --call all\", carry=[\"$STAGE\"], timeout_s=560)"
	[ $KEEP = 1 ] || rm -rf "$tmp"
	exit $((rc != 0))
}

case $MODE in
stage) stage ;;
dry) dry_run ;;
call)
	mkdir -p "$OUTDIR"
	: >"$OUTDIR/setup.txt"
	rm -f "$OUTDIR/bench.jsonl"
	case $CALL in
	all | 1 | 2) ;;
	*) echo "gpu_check: --call all, 1 (the tests) or 2 (the measurements)"; exit 2 ;;
	esac
	MODELS=build/models
	[ "$CALL" = 1 ] || pick_models_dir
	prereqs
	build
	[ "$CALL" = 2 ] || tests
	[ "$CALL" = 1 ] || measure
	[ "$MODELS" = /dev/shm/pagechat-gpu ] && rm -rf "$MODELS"
	summary | tee -a "$OUTDIR/summary.txt"
	exit $FAILED
	;;
*) sed -n '2,40p' "$0"; exit 2 ;;
esac
