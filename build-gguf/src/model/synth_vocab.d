build-gguf/src/model/synth_vocab.o: src/model/synth_vocab.c \
 src/model/synth_vocab.h src/model/../gguf/gguf.h \
 src/model/../gguf/../quant/quant.h src/model/../gguf/../quant/blocks.h \
 src/model/../gguf/../quant/../util/rng.h \
 src/model/../gguf/../util/util.h
src/model/synth_vocab.h:
src/model/../gguf/gguf.h:
src/model/../gguf/../quant/quant.h:
src/model/../gguf/../quant/blocks.h:
src/model/../gguf/../quant/../util/rng.h:
src/model/../gguf/../util/util.h:
