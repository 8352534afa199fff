build-gguf/tests/test_fp16.o: tests/test_fp16.c tests/oracle.h \
 tests/test.h tests/../src/quant/fp16.h tests/../src/quant/blocks.h \
 tests/../src/quant/quant.h tests/../src/quant/../util/rng.h \
 tests/../src/util/rng.h tests/../src/util/util.h
tests/oracle.h:
tests/test.h:
tests/../src/quant/fp16.h:
tests/../src/quant/blocks.h:
tests/../src/quant/quant.h:
tests/../src/quant/../util/rng.h:
tests/../src/util/rng.h:
tests/../src/util/util.h:
