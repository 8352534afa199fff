build-tok/src/quant/dot_k_avx2.o: src/quant/dot_k_avx2.c src/quant/dot.h \
 src/quant/quant.h src/quant/blocks.h src/quant/../util/rng.h \
 src/quant/tables.h
src/quant/dot.h:
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/tables.h:
