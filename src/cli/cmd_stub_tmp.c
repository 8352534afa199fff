int cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; return 2; }
int cmd_synth(int argc, char **argv) { (void)argc; (void)argv; return 2; }
