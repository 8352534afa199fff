build-gguf/tests/test_gguf_bad.o: tests/test_gguf_bad.c \
 tests/../src/gguf/gguf.h tests/../src/gguf/../quant/quant.h \
 tests/../src/gguf/../quant/blocks.h \
 tests/../src/gguf/../quant/../util/rng.h \
 tests/../src/gguf/../util/util.h tests/test.h
tests/../src/gguf/gguf.h:
tests/../src/gguf/../quant/quant.h:
tests/../src/gguf/../quant/blocks.h:
tests/../src/gguf/../quant/../util/rng.h:
tests/../src/gguf/../util/util.h:
tests/test.h:
