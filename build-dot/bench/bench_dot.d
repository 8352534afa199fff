build-dot/bench/bench_dot.o: bench/bench_dot.c bench/../src/quant/dot.h \
 bench/../src/quant/quant.h bench/../src/quant/blocks.h \
 bench/../src/quant/../util/rng.h bench/../src/util/rng.h \
 bench/../src/util/util.h
bench/../src/quant/dot.h:
bench/../src/quant/quant.h:
bench/../src/quant/blocks.h:
bench/../src/quant/../util/rng.h:
bench/../src/util/rng.h:
bench/../src/util/util.h:
