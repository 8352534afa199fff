build-lead/src/cli/cmd_stub_tmp.o: src/cli/cmd_stub_tmp.c
