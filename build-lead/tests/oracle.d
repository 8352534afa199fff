build-lead/tests/oracle.o: tests/oracle.c tests/oracle.h tests/test.h
tests/oracle.h:
tests/test.h:
