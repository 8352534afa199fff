build-gguf/src/cli/cmd_inspect.o: src/cli/cmd_inspect.c src/cli/cli.h \
 src/cli/args.h src/cli/../gguf/gguf.h src/cli/../gguf/../quant/quant.h \
 src/cli/../gguf/../quant/blocks.h src/cli/../gguf/../quant/../util/rng.h \
 src/cli/../gguf/../util/util.h src/cli/../moe/geometry.h \
 src/cli/../moe/../gguf/gguf.h
src/cli/cli.h:
src/cli/args.h:
src/cli/../gguf/gguf.h:
src/cli/../gguf/../quant/quant.h:
src/cli/../gguf/../quant/blocks.h:
src/cli/../gguf/../quant/../util/rng.h:
src/cli/../gguf/../util/util.h:
src/cli/../moe/geometry.h:
src/cli/../moe/../gguf/gguf.h:
