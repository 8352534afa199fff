build-gguf/src/quant/dequant.o: src/quant/dequant.c src/quant/quant.h \
 src/quant/blocks.h src/quant/../util/rng.h src/quant/codec.h \
 src/quant/fp16.h src/quant/tables.h src/quant/../util/util.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/codec.h:
src/quant/fp16.h:
src/quant/tables.h:
src/quant/../util/util.h:
