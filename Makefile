# ft: build, test, fuzz and bench. `make help` lists the targets.
#
# make            build build/ft (SAN=1: with AddressSanitizer + UBSan, into build-san/)
# make test       build and run the test suite (ends with "N passed, N failed")
# make test-san   the suite under AddressSanitizer and UndefinedBehaviorSanitizer
# make test-gpu   the GPU suite (on a machine with an NVIDIA GPU)
# make fuzz       build the libFuzzer targets (clang) into build-fuzz/; FUZZ_SECONDS=N runs them
# make bench      build and run the micro-benchmarks
# make deps       install the test oracle (llama.cpp via npm) into node_modules/
# make check      deps + test + test-san: what CI runs

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -MMD -MP
LDLIBS  += -lpcre2-8 -ljansson -lpthread -lm -ldl

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
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

# SIMD files are compiled for their instruction set and only entered after a run-time check.
$(BUILD)/%_avx2.o: CFLAGS += -mavx2 -mfma -mf16c

.PHONY: all test test-san test-gpu fuzz fuzz-build bench deps check clean help
all: $(BUILD)/ft

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/ft: $(BUILD)/src/cli/main.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/ft_tests: $(TEST_OBJ) $(LIB_OBJ)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

test: $(BUILD)/ft $(BUILD)/ft_tests
	FT_BIN=$(BUILD)/ft $(BUILD)/ft_tests $(T)

test-san:
	$(MAKE) --no-print-directory SAN=1 test

test-gpu:
	@echo "no GPU tests yet: 0 passed, 0 failed"

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

deps: node_modules/.package-lock.json

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --omit=optional --ignore-scripts --no-audit --no-fund

check: deps
	$(MAKE) --no-print-directory test
	$(MAKE) --no-print-directory test-san

clean:
	rm -rf build build-san build-fuzz

help:
	@sed -n '3,11p' Makefile

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
