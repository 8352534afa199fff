build-quant/src/model/synth.o: src/model/synth.c src/model/synth.h \
 src/model/../quant/quant.h src/model/../quant/blocks.h \
 src/model/../quant/../util/rng.h src/model/../util/util.h \
 src/model/synth_vocab.h src/model/../gguf/gguf.h \
 src/model/../gguf/../quant/quant.h src/model/../gguf/../util/util.h
src/model/synth.h:
src/model/../quant/quant.h:
src/model/../quant/blocks.h:
src/model/../quant/../util/rng.h:
src/model/../util/util.h:
src/model/synth_vocab.h:
src/model/../gguf/gguf.h:
src/model/../gguf/../quant/quant.h:
src/model/../gguf/../util/util.h:
