# tests/fuzz/fuzz.mk: fuzz targets, included by the Makefile.
#
# A target is one file tests/fuzz/fuzz_NAME.c (see tests/fuzz/fuzz.h); its
# corpus lives in tests/fuzz/corpus/NAME/, inputs that once failed in
# tests/fuzz/regress/NAME/, and an optional dictionary in
# tests/fuzz/fuzz_NAME.dict. Nothing here needs editing to add one, unless it
# reaches a module not yet in FUZZ_LIB_SRC.
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ=json]   run every target (or one), -j for
#                                              several at once; new inputs go to
#                                              build/fuzz/new/NAME/, crashes to
#                                              build/fuzz/artifacts/NAME/
#   make fuzz FUZZ_MERGE=1                     ... then merge the new inputs that
#                                              reach new edges into the corpus
#                                              (edges only, not hit counts, so
#                                              it stays at tens of files)
#   make fuzz-seed                             rewrite the generated seed inputs
#
# `make test` builds tests/test_fuzz_replay with the normal compiler, which
# replays every corpus and regression input through the same entry points;
# `make test SANITIZE=1 FUZZ_REPLAY=1` also replays them through the libFuzzer builds
# (make fuzz-replay: clang's ASan/UBSan, which check more than gcc's: a zero
# offset applied to a null pointer, #42.12), each input run once, no fuzzing.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_MAX_LEN ?= 4096
FUZZ_DIR     := build/fuzz
FUZZ_SRC     := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
FUZZ         ?= $(FUZZ_NAMES)
FUZZ_DEB_PKGS := clang libclang-rt-14-dev
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c11 -g -O1 -fno-omit-frame-pointer $(FUZZ_SAN) -pthread
# The modules the targets reach, instrumented; linked from an archive, so
# each fuzzer takes only what it calls.
# (fuzz_http_server runs the whole engine and server: every module below ui/;
# fuzz_chat_view and fuzz_remote_view draw with ui/ into a virtual screen.)
FUZZ_LIB_SRC := $(wildcard link/*.c conv/*.c engine/*.c kv/*.c models/*.c kernels/*.c kernels/cpu/*.c base/*.c) app/batch_req.c \
                config/cfg.c config/params.c $(wildcard ui/*.c) app/http_req.c app/serve.c app/http_out.c app/http_gen.c \
                app/http_info.c app/opts.c app/app_common.c
FUZZ_LIB_SRC := $(filter-out $(NOHTTP_SRC),$(FUZZ_LIB_SRC))
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)

# ---- replay under `make test` (normal compiler) ----
FUZZ_REPLAY_OBJ := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay_%.o)
$(BUILD)/tests/test_fuzz_replay: $(FUZZ_REPLAY_OBJ)
# Tests that call the batch request parser (app/, not in the library objects).
$(BUILD)/tests/test_fuzz_replay $(BUILD)/tests/test_limits: $(BUILD)/app/batch_req.o
# ... and the HTTP server's (SERVE_OBJ, in the Makefile).
$(BUILD)/tests/test_fuzz_replay: $(SERVE_OBJ)
$(BUILD)/tests/test_fuzz_replay.o: CPPFLAGS += -DFUZZ_TARGETS='$(foreach n,$(FUZZ_NAMES),X($(n)))'
$(BUILD)/tests/test_fuzz_replay.o: $(FUZZ_SRC)
$(BUILD)/tests/fuzz/replay_%.o: tests/fuzz/fuzz_%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -DFUZZ_REPLAY -DLLVMFuzzerTestOneInput=fuzz_$*_one \
	  -DLLVMFuzzerInitialize=fuzz_$*_init -c -o $@ $<

# ---- libFuzzer builds ----
$(FUZZ_DIR)/obj/%.o: %.c | fuzz-deps
	@mkdir -p $(@D)
	$(FUZZ_CC) -I. -MMD -MP -D_GNU_SOURCE $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
# The SIMD kernels (reached through the engine by fuzz_http_server, never a
# target themselves) are built by the normal compiler, uninstrumented: clang
# 14 does not know one of the CPU features they test for, and under ASan it
# spends over 20 CPU-minutes and 3 GB on one of them (avx512_attn.c). All of
# kernels/cpu/avx*.c: the files the kernels were split into go with them.
FUZZ_CC_SRC := $(wildcard kernels/cpu/avx*.c)
$(FUZZ_CC_SRC:%.c=$(FUZZ_DIR)/obj/%.o): $(FUZZ_DIR)/obj/%.o: %.c | fuzz-deps
	@mkdir -p $(@D)
	$(CC) -I. -MMD -MP -D_GNU_SOURCE -std=c11 -O2 -g -pthread -c -o $@ $<
# (fuzz.mk is a prerequisite so that a module added above gets built: with
# .SECONDARY, a missing object alone would not make the archive stale)
$(FUZZ_DIR)/libpagechat.a: $(FUZZ_LIB_OBJ) tests/fuzz/fuzz.mk
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_DIR)/libpagechat.a
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -pthread -o $@ $^ -lm -lyaml -lmicrohttpd -lcurl -lncursesw -lreadline -ldl

fuzz-deps:
	@missing=$$(for p in $(FUZZ_DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing: $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing packages; run: sudo apt-get install $$missing"; exit 1; fi; fi

fuzz-build: fuzz-deps $(FUZZ:%=$(FUZZ_DIR)/fuzz_%)

# One target for FUZZ_SECONDS: the committed corpus and regressions are read,
# new inputs written to build/fuzz/new/NAME. Prints the executions and the
# outcome; fails on any crash, leak, timeout or sanitizer report.
fuzz-run-%: $(FUZZ_DIR)/fuzz_% | fuzz-deps
	@mkdir -p $(FUZZ_DIR)/new/$* $(FUZZ_DIR)/artifacts/$* tests/fuzz/corpus/$*
	@dict=$(wildcard tests/fuzz/fuzz_$*.dict); \
	LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp$${LSAN_OPTIONS:+:$$LSAN_OPTIONS} \
	$(FUZZ_DIR)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -malloc_limit_mb=512 -max_len=$(FUZZ_MAX_LEN) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/artifacts/$*/ $${dict:+-dict=$$dict} \
	  $(FUZZ_DIR)/new/$* tests/fuzz/corpus/$* $(wildcard tests/fuzz/regress/$*) \
	  >$(FUZZ_DIR)/$*.log 2>&1; rc=$$?; \
	execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_DIR)/$*.log); \
	echo "fuzz $*: $${execs:-?} executions in $(FUZZ_SECONDS) s, exit $$rc (log: $(FUZZ_DIR)/$*.log)"; \
	if [ $$rc -ne 0 ]; then grep -m1 -E 'ERROR|SUMMARY|property failed' $(FUZZ_DIR)/$*.log; exit 1; fi
ifeq ($(FUZZ_MERGE),1)
	@$(FUZZ_DIR)/fuzz_$* -merge=1 -use_counters=0 -max_len=$(FUZZ_MAX_LEN) -timeout=10 \
	  tests/fuzz/corpus/$* $(FUZZ_DIR)/new/$* >$(FUZZ_DIR)/$*.merge.log 2>&1 && \
	  echo "fuzz $*: corpus now $$(ls tests/fuzz/corpus/$* | wc -l) files" || \
	  { echo "fuzz $*: merge failed (log: $(FUZZ_DIR)/$*.merge.log)"; exit 1; }
endif

fuzz: $(FUZZ:%=fuzz-run-%)

# Every committed input of one target, run once by its libFuzzer build (file
# arguments: no fuzzing); one line in make test's "N passed, N failed" form.
fuzz-replay-%: $(FUZZ_DIR)/fuzz_% | fuzz-deps
	@files=$$(ls -d tests/fuzz/corpus/$*/* tests/fuzz/regress/$*/* 2>/dev/null); n=$$(echo $$files | wc -w); \
	LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp$${LSAN_OPTIONS:+:$$LSAN_OPTIONS} \
	$(FUZZ_DIR)/fuzz_$* -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=512 $$files \
	  >$(FUZZ_DIR)/$*.replay.log 2>&1 && \
	echo "fuzz replay $*: $$n inputs under clang ASan/UBSan: 1 passed, 0 failed" || \
	{ echo "fuzz replay $*: FAIL: $$(grep -m1 -E 'ERROR|runtime error|property failed' $(FUZZ_DIR)/$*.replay.log)" \
	  "(log: $(FUZZ_DIR)/$*.replay.log)"; echo "fuzz replay $*: 0 passed, 1 failed"; }
fuzz-replay: $(FUZZ:%=fuzz-replay-%)

# The generated seeds (synthetic GGUF files, vocabularies, texts,
# conversations): tests/fuzz/seed.c writes them into the corpus directories.
$(BUILD)/tests/fuzz/seed: tests/fuzz/seed.c tests/fuzz/gguf_gen.h $(BUILD)/base/base.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/base/base.o
fuzz-seed: $(BUILD)/tests/fuzz/seed
	$(BUILD)/tests/fuzz/seed tests/fuzz/corpus

.PHONY: fuzz fuzz-build fuzz-deps fuzz-seed fuzz-replay
-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_SRC:%.c=$(FUZZ_DIR)/obj/%.d) $(FUZZ_REPLAY_OBJ:.o=.d)
