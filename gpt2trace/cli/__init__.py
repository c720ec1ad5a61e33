"""The `gpt2trace` command line: a thin layer over the Python API (each command group in its own module)."""
