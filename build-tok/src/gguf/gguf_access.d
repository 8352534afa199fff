build-tok/src/gguf/gguf_access.o: src/gguf/gguf_access.c \
 src/gguf/gguf_impl.h src/gguf/gguf.h src/gguf/../quant/quant.h \
 src/gguf/../quant/blocks.h src/gguf/../quant/../util/rng.h \
 src/gguf/../util/util.h
src/gguf/gguf_impl.h:
src/gguf/gguf.h:
src/gguf/../quant/quant.h:
src/gguf/../quant/blocks.h:
src/gguf/../quant/../util/rng.h:
src/gguf/../util/util.h:
