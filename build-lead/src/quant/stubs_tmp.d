build-lead/src/quant/stubs_tmp.o: src/quant/stubs_tmp.c src/quant/quant.h \
 src/quant/blocks.h src/quant/../util/rng.h src/quant/dot.h \
 src/quant/../util/util.h
src/quant/quant.h:
src/quant/blocks.h:
src/quant/../util/rng.h:
src/quant/dot.h:
src/quant/../util/util.h:
