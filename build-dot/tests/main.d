build-dot/tests/main.o: tests/main.c tests/test.h
tests/test.h:
