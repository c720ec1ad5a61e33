"""`python -m gpt2trace ...` is the `gpt2trace` command (mpiexec starts ranks this way)."""
from gpt2trace.cli.main import main

main()
