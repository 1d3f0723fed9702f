#!/bin/sh
# tools/llamacpp.sh [TOOL]: prints the path of a llama.cpp program (TOOL:
# llama-server, the default, llama-bench, llama-batched-bench, llama-quantize
# or llama-perplexity), built once
# into build/llamacpp/ (CPU, native ISA) from the llama.cpp sources inside the
# pinned llama-cpp-python source package on PyPI. The benchmarks
# (tools/bench_llamacpp.sh, tools/bench_serve.sh) and `make
# test-remote-llamacpp` all take their llama.cpp from here. Building needs
# pip, cmake and g++ (installed with apt-get when run as root) and takes
# minutes; logs go to build/llamacpp/*.log, progress lines to stderr. Nothing
# of it enters the repository.
#
# LLAMACPP_AMX=off builds without Intel AMX (into build/llamacpp/cmake-noamx):
# on a VM whose CPU reports AMX, llama.cpp's AMX kernels (used with weight
# repacking, its default) can die with SIGILL in tinygemm_kernel_amx; the
# build without them keeps repacking and its AVX-512 VNNI kernels, llama.cpp's
# best that runs there.
set -eu

LLCPP_PY_VERSION=0.3.36
TOOL=${1:-llama-server}
case "$TOOL" in
llama-server | llama-bench | llama-batched-bench | llama-quantize | llama-perplexity) ;;
*) echo "llamacpp: unknown tool '$TOOL' (llama-server, llama-bench, llama-batched-bench, llama-quantize or" \
	"llama-perplexity)" >&2; exit 2 ;;
esac
DIR=build/llamacpp
CM=cmake
FLAGS=""
case "${LLAMACPP_AMX:-on}" in
on) ;;
off) CM=cmake-noamx FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
*) echo "llamacpp: LLAMACPP_AMX is on or off, not '$LLAMACPP_AMX'" >&2; exit 2 ;;
esac
BIN=$DIR/$CM/bin/$TOOL
if [ ! -x "$BIN" ]; then
	need=""
	command -v cmake >/dev/null || need="$need cmake"
	command -v g++ >/dev/null || need="$need g++"
	python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
	if [ -n "$need" ]; then
		if [ "$(id -u)" = 0 ]; then
			apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >&2
		else
			echo "llamacpp: needs$need: sudo apt-get install$need" >&2
			exit 2
		fi
	fi
	mkdir -p "$DIR"
	if [ ! -d "$DIR/src/vendor/llama.cpp" ]; then
		echo "llamacpp: fetching llama-cpp-python $LLCPP_PY_VERSION (source) from PyPI" >&2
		python3 -m pip download --quiet --no-deps --no-binary :all: -d "$DIR" \
			"llama-cpp-python==$LLCPP_PY_VERSION" >&2
		rm -rf "$DIR/src"
		mkdir -p "$DIR/src"
		tar xzf "$DIR/llama_cpp_python-$LLCPP_PY_VERSION.tar.gz" -C "$DIR/src" --strip-components=1
	fi
	echo "llamacpp: building $TOOL (CPU, native ISA) in $DIR (minutes)" >&2
	cmake -S "$DIR/src/vendor/llama.cpp" -B "$DIR/$CM" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_CXX_FLAGS="$FLAGS" -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_TESTS=OFF >"$DIR/$CM.log" 2>&1 ||
		{ echo "llamacpp: cmake failed, see $DIR/$CM.log" >&2; exit 1; }
	cmake --build "$DIR/$CM" --target "$TOOL" -j "${LLAMA_JOBS:-$(nproc)}" >"$DIR/build-$CM-$TOOL.log" 2>&1 ||
		{ echo "llamacpp: build failed, see $DIR/build-$CM-$TOOL.log" >&2; exit 1; }
fi
echo "$BIN"
