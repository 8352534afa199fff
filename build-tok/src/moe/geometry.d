build-tok/src/moe/geometry.o: src/moe/geometry.c src/moe/geometry.h \
 src/moe/../gguf/gguf.h src/moe/../gguf/../quant/quant.h \
 src/moe/../gguf/../quant/blocks.h src/moe/../gguf/../quant/../util/rng.h \
 src/moe/../gguf/../util/util.h
src/moe/geometry.h:
src/moe/../gguf/gguf.h:
src/moe/../gguf/../quant/quant.h:
src/moe/../gguf/../quant/blocks.h:
src/moe/../gguf/../quant/../util/rng.h:
src/moe/../gguf/../util/util.h:
