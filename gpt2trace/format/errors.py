"""Errors a user can act on: one-line messages naming the file or option, exit code 2 at the CLI."""


class TraceError(Exception):
    """A trace file that cannot be read or does not follow the schema; the message names the file."""


class OutputError(Exception):
    """An output path we refuse (it is an input, a directory, not writable) or could not write (disk full);
    the message names the path and, where it can, the option."""
