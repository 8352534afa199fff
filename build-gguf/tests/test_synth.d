build-gguf/tests/test_synth.o: tests/test_synth.c tests/oracle.h \
 tests/test.h tests/../src/gguf/gguf.h tests/../src/gguf/../quant/quant.h \
 tests/../src/gguf/../quant/blocks.h \
 tests/../src/gguf/../quant/../util/rng.h \
 tests/../src/gguf/../util/util.h tests/../src/model/synth.h \
 tests/../src/model/../quant/quant.h tests/../src/model/../util/util.h \
 tests/../src/moe/geometry.h tests/../src/moe/../gguf/gguf.h
tests/oracle.h:
tests/test.h:
tests/../src/gguf/gguf.h:
tests/../src/gguf/../quant/quant.h:
tests/../src/gguf/../quant/blocks.h:
tests/../src/gguf/../quant/../util/rng.h:
tests/../src/gguf/../util/util.h:
tests/../src/model/synth.h:
tests/../src/model/../quant/quant.h:
tests/../src/model/../util/util.h:
tests/../src/moe/geometry.h:
tests/../src/moe/../gguf/gguf.h:
