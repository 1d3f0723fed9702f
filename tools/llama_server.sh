#!/bin/sh
# tools/llama_server.sh: prints the path of a llama.cpp llama-server binary:
# $LLAMA_SERVER if set, else build/llamacpp/cmake/bin/llama-server, built
# there once (CPU, native ISA) from the llama.cpp sources inside the pinned
# llama-cpp-python source package on PyPI, as tools/bench_serve.sh builds it
# (needs pip, cmake and g++; installed as root when missing). Build logs go
# to build/llamacpp/*.log; progress lines to stderr.
set -eu

LLCPP_PY_VERSION=0.3.36
if [ -n "${LLAMA_SERVER:-}" ]; then
	echo "$LLAMA_SERVER"
	exit 0
fi
DIR=build/llamacpp
BIN=$DIR/cmake/bin/llama-server
if [ ! -x "$BIN" ]; then
	need=""
	command -v cmake >/dev/null || need="$need cmake"
	command -v g++ >/dev/null || need="$need g++"
	python3 -m pip --version >/dev/null 2>&1 || need="$need python3-pip"
	if [ -n "$need" ]; then
		if [ "$(id -u)" = 0 ]; then
			apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >&2
		else
			echo "llama_server: needs$need: sudo apt-get install$need" >&2
			exit 2
		fi
	fi
	mkdir -p "$DIR"
	if [ ! -d "$DIR/src/vendor/llama.cpp" ]; then
		echo "llama_server: fetching llama-cpp-python $LLCPP_PY_VERSION (source) from PyPI" >&2
		python3 -m pip download --quiet --no-deps --no-binary :all: -d "$DIR" \
			"llama-cpp-python==$LLCPP_PY_VERSION" >&2
		rm -rf "$DIR/src"
		mkdir -p "$DIR/src"
		tar xzf "$DIR/llama_cpp_python-$LLCPP_PY_VERSION.tar.gz" -C "$DIR/src" --strip-components=1
	fi
	echo "llama_server: building llama-server (CPU, native ISA) in $DIR (minutes)" >&2
	cmake -S "$DIR/src/vendor/llama.cpp" -B "$DIR/cmake" -DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_BUILD_TESTS=OFF >"$DIR/cmake-server.log" 2>&1 ||
		{ echo "llama_server: cmake failed, see $DIR/cmake-server.log" >&2; exit 1; }
	cmake --build "$DIR/cmake" --target llama-server -j "${LLAMA_JOBS:-$(nproc)}" >"$DIR/build-server.log" 2>&1 ||
		{ echo "llama_server: build failed, see $DIR/build-server.log" >&2; exit 1; }
fi
echo "$BIN"
