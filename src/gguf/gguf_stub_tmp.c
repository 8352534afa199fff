// TEMPORARY: removed when gguf_read.c / gguf_write.c exist.
