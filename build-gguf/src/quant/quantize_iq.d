build-gguf/src/quant/quantize_iq.o: src/quant/quantize_iq.c \
 src/quant/quant.h src/quant/blocks.h src/quant/../util/rng.h \
 src/quant/codec.h src/quant/fp16.h src/quant/tables.h \
 src/quant/../util/util.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/codec.h:
src/quant/fp16.h:
src/quant/tables.h:
src/quant/../util/util.h:
