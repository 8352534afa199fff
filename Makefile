# ft: build, test, fuzz and bench. `make help` lists the targets.
#
# make            build build/ft (SAN=1: with AddressSanitizer + UBSan, into build-san/)
# make test       build and run the test suite (ends with "N passed, N failed")
# make test-san   the suite under AddressSanitizer and UndefinedBehaviorSanitizer
# make test-gpu   the GPU suite (on a machine with an NVIDIA GPU; CUDA_ARCHS=sm_90a there)
# make bench-cuda the CUDA matvec benchmark (GPU machine); bench-cuda-gemm the prefill GEMM one
# make fuzz       build the libFuzzer targets (clang) into build-fuzz/; FUZZ_SECONDS=N runs them
# make bench      build and run the micro-benchmarks (bench-cpu-moe: the CPU MoE op at decode;
#                 bench-cpu-attn: the CPU attention of one token at depths;
#                 bench-sampler: the sampler against llama.cpp's; bench-grammar: constrained
#                 decoding's token masks)
# make deps       install the test oracle (llama.cpp via npm) into node_modules/
# make check      deps + test + test-san: what CI runs
# make install    build/ft to $(DESTDIR)$(PREFIX)/bin (PREFIX=/usr/local); make uninstall removes it

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -MMD -MP
CFLAGS  += $(CFLAGS_EXTRA)
LDFLAGS += $(LDFLAGS_EXTRA)
LDLIBS  += -lpcre2-8 -ljansson -levent -levent_pthreads -lpthread -lm -ldl

ifeq ($(FUZZ),1)
# libFuzzer builds: clang, every object instrumented for coverage and sanitizers
CC      := clang
BUILD   := build-fuzz
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=fuzzer,address,undefined
else ifeq ($(SAN),1)
BUILD   ?= build-san
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
else
BUILD   ?= build
endif

SRC      := $(shell find src -name '*.c' | sort)
LIB_SRC  := $(filter-out src/cli/main.c,$(SRC))
TEST_SRC := $(wildcard tests/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/web_files.o
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

# CUDA: src/backend/cuda/*.cu are compiled with nvcc (from PATH, else /usr/local/cuda/bin) for
# CUDA_ARCHS (space-separated, e.g. "sm_80" for CI's compile check, "sm_90a" on an H200), and
# the runtime is linked statically, so one ft binary also runs where there is no driver.
# Without nvcc, or with CUDA=0 (the sanitizer and fuzz builds), cuda_stub.c reports no device.
ifneq ($(filter 1,$(FUZZ) $(SAN)),)
CUDA ?= 0
endif
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_ARCHS ?= sm_80
ifeq ($(CUDA),0)
NVCC :=
endif
ifneq ($(strip $(NVCC)),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
CU_SRC    := $(wildcard src/backend/cuda/*.cu)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
LIB_OBJ   := $(filter-out $(BUILD)/src/backend/cuda/cuda_stub.o,$(LIB_OBJ)) $(CU_OBJ)
NVCCFLAGS ?= -O3 -g
NVCCFLAGS += -std=c++17 -MMD -MP -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
             $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(patsubst sm_%,%,$(a)),code=$(a))
LDLIBS    += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -lrt -lstdc++

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
else
LIB_OBJ   := $(filter-out $(BUILD)/src/backend/cuda/%.o,$(LIB_OBJ)) $(BUILD)/src/backend/cuda/cuda_stub.o
endif

# The GPU suite: tests/main.c's runner and fixtures with tests_gpu/*.c (it skips without a device).
GPU_TEST_OBJ := $(BUILD)/tests/main.o $(BUILD)/tests/batch_sim.o $(BUILD)/tests/fixtures.o $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests_gpu/*.c))

# SIMD files are compiled for their instruction set and only entered after a run-time check.
$(BUILD)/%_avx2.o: CFLAGS += -mavx2 -mfma -mf16c

.PHONY: all test test-san test-gpu fuzz fuzz-build bench bench-cpu-moe bench-cpu-attn bench-sampler bench-grammar bench-cuda bench-cuda-gemm deps check install uninstall clean help
all: $(BUILD)/ft

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# ft serve's web page: the files of src/server/web/ as C arrays (scripts/embed.sh: od and awk),
# linked into ft (src/server/web.h).
WEB_FILES := $(sort $(wildcard src/server/web/*))
$(BUILD)/gen/web_files.c: $(WEB_FILES) scripts/embed.sh
	@mkdir -p $(dir $@)
	sh scripts/embed.sh src/server/web $(WEB_FILES) > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/web_files.o: $(BUILD)/gen/web_files.c
	$(CC) $(CFLAGS) -Isrc/server -c $< -o $@

$(BUILD)/ft: $(BUILD)/src/cli/main.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/ft_tests: $(TEST_OBJ) $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

test: $(BUILD)/ft $(BUILD)/ft_tests
	FT_BIN=$(BUILD)/ft $(BUILD)/ft_tests $(T)

test-san:
	$(MAKE) --no-print-directory SAN=1 test

# `make test` also builds the GPU suite, so CI compiles it (and the .cu files) without a GPU;
# a build without nvcc has only the CUDA constructor's stub, and no GPU suite to build.
ifneq ($(strip $(NVCC)),)
test: $(BUILD)/ft_tests_gpu
endif

# The GPU binaries link the library objects from an archive, so only what they use comes in.
# (A library global that shares a libc function's name, as model.c's `bind` once did bind(2),
# would be exported over libc's, and the CUDA driver's calls would land in it: keep globals
# prefixed.)
$(BUILD)/libft.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/ft_tests_gpu: $(GPU_TEST_OBJ) $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

test-gpu: $(BUILD)/ft_tests_gpu $(BUILD)/ft
	FT_BIN=$(BUILD)/ft $(BUILD)/ft_tests_gpu $(T)

FUZZ_SECONDS ?= 0
FUZZ_TARGETS := $(patsubst fuzz/%.c,build-fuzz/%,$(wildcard fuzz/fuzz_*.c))
fuzz:
	$(MAKE) --no-print-directory FUZZ=1 fuzz-build
ifneq ($(FUZZ_SECONDS),0)
	@for t in $(FUZZ_TARGETS); do n=$$(basename $$t); mkdir -p build-fuzz/corpus-$$n; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build-fuzz/corpus-$$n fuzz/seeds/$$n || exit 1; done
endif

fuzz-build: $(FUZZ_TARGETS)

build-fuzz/fuzz_%: build-fuzz/fuzz/fuzz_%.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

bench: $(BUILD)/bench_dot
	$(BUILD)/bench_dot

$(BUILD)/bench_dot: $(BUILD)/bench/bench_dot.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# the CPU backend's attention for one token at depths (BENCH_ARGS: see bench/bench_cpu_attn.c)
bench-cpu-attn: $(BUILD)/bench_cpu_attn
	$(BUILD)/bench_cpu_attn $(BENCH_ARGS)

$(BUILD)/bench_cpu_attn: $(BUILD)/bench/bench_cpu_attn.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# the CPU backend's moe_ffn at decode on Qwen3-30B-A3B-shaped layers (16 GB by default);
# BENCH_ARGS: e.g. "-t 1,16 -l 8"; see bench/bench_cpu_moe.c
bench-cpu-moe: $(BUILD)/bench_cpu_moe
	$(BUILD)/bench_cpu_moe $(BENCH_ARGS)

$(BUILD)/bench_cpu_moe: $(BUILD)/bench/bench_cpu_moe.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# BENCH_ARGS: e.g. "--quick"; see bench/bench_cuda_matvec.cu
bench-cuda: $(BUILD)/bench_cuda_matvec
	$(BUILD)/bench_cuda_matvec $(BENCH_ARGS)

$(BUILD)/bench_cuda_matvec: $(BUILD)/bench/bench_cuda_matvec.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# the prefill GEMM against the matvec path at 512 tokens; BENCH_ARGS: see bench/bench_cuda_gemm.cu
bench-cuda-gemm: $(BUILD)/bench_cuda_gemm
	$(BUILD)/bench_cuda_gemm $(BENCH_ARGS)

$(BUILD)/bench_cuda_gemm: $(BUILD)/bench/bench_cuda_gemm.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# llama.cpp's headers and test vocabularies, for the tests only: unpacked from the source
# bundle inside node-llama-cpp (tests/oracle.c includes llama.h to call its C API). Where
# node_modules is absent the tests build without them and those oracles skip.
LLAMA_BUNDLE := node_modules/node-llama-cpp/llama/gitRelease.bundle
LLAMA_SRC    := build/llama.cpp
ifneq ($(wildcard $(LLAMA_BUNDLE)),)
$(LLAMA_SRC)/include/llama.h: $(LLAMA_BUNDLE)
	@tmp=$(LLAMA_SRC).tmp.$$$$ && rm -rf $$tmp && mkdir -p $$tmp && \
	  git clone -q --bare $(LLAMA_BUNDLE) $$tmp/git && \
	  git --git-dir=$$tmp/git archive HEAD include ggml/include models | tar -x -C $$tmp && \
	  rm -rf $$tmp/git $(LLAMA_SRC) && mv $$tmp $(LLAMA_SRC) && touch $@
$(BUILD)/tests/oracle.o: CFLAGS += -I$(LLAMA_SRC)/include -I$(LLAMA_SRC)/ggml/include
$(BUILD)/tests/oracle.o: | $(LLAMA_SRC)/include/llama.h
endif

# constrained decoding's cost per token: a JSON schema's token masks over qwen2's 151,936 tokens;
# BENCH_ARGS: e.g. "--requests 50"; see bench/bench_grammar.c (run it under taskset -c N)
bench-grammar: $(BUILD)/bench_grammar
	$(BUILD)/bench_grammar $(BENCH_ARGS)

$(BUILD)/bench_grammar: $(BUILD)/bench/bench_grammar.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# ft's sampler against llama.cpp's sampler chain on a 151,936-token vocabulary
bench-sampler: $(BUILD)/bench_sampler
	$(BUILD)/bench_sampler $(BENCH_ARGS)

$(BUILD)/bench/bench_sampler.o: CFLAGS += -I$(LLAMA_SRC)/include -I$(LLAMA_SRC)/ggml/include
$(BUILD)/bench/bench_sampler.o: | $(LLAMA_SRC)/include/llama.h
$(BUILD)/bench_sampler: $(BUILD)/bench/bench_sampler.o $(BUILD)/libft.a
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS) -ldl

deps: node_modules/.package-lock.json

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --omit=optional --ignore-scripts --no-audit --no-fund

check: deps
	$(MAKE) --no-print-directory test
	$(MAKE) --no-print-directory test-san

PREFIX ?= /usr/local

install: $(BUILD)/ft
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/ft $(DESTDIR)$(PREFIX)/bin/ft

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ft

clean:
	rm -rf build build-san build-fuzz

help:
	@sed -n '3,15p' Makefile

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
