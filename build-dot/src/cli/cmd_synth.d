build-dot/src/cli/cmd_synth.o: src/cli/cmd_synth.c src/cli/cli.h \
 src/cli/args.h src/cli/../model/synth.h \
 src/cli/../model/../quant/quant.h src/cli/../model/../quant/blocks.h \
 src/cli/../model/../quant/../util/rng.h src/cli/../model/../util/util.h
src/cli/cli.h:
src/cli/args.h:
src/cli/../model/synth.h:
src/cli/../model/../quant/quant.h:
src/cli/../model/../quant/blocks.h:
src/cli/../model/../quant/../util/rng.h:
src/cli/../model/../util/util.h:
