build-dot/src/quant/types.o: src/quant/types.c src/quant/quant.h \
 src/quant/blocks.h src/quant/../util/rng.h src/quant/../util/util.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/../util/util.h:
