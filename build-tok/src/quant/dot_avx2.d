build-tok/src/quant/dot_avx2.o: src/quant/dot_avx2.c src/quant/dot.h \
 src/quant/quant.h src/quant/blocks.h src/quant/../util/rng.h \
 src/quant/codec.h src/quant/fp16.h src/quant/tables.h
src/quant/dot.h:
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/codec.h:
src/quant/fp16.h:
src/quant/tables.h:
