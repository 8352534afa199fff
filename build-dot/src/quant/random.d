build-dot/src/quant/random.o: src/quant/random.c src/quant/quant.h \
 src/quant/blocks.h src/quant/../util/rng.h src/quant/fp16.h \
 src/quant/../util/util.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/fp16.h:
src/quant/../util/util.h:
