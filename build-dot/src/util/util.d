build-dot/src/util/util.o: src/util/util.c src/util/util.h
src/util/util.h:
