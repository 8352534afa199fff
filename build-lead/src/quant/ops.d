build-lead/src/quant/ops.o: src/quant/ops.c src/quant/quant.h \
 src/quant/blocks.h src/quant/../util/rng.h src/quant/dot.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/dot.h:
