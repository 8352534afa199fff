build-lead/src/gguf/gguf_stub_tmp.o: src/gguf/gguf_stub_tmp.c
