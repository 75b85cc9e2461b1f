"""Tools built on the library: text rendering shared by the command line and the benchmark."""
