"""Errors about traces a user can act on: one-line messages, exit code 2 at the CLI."""


class TraceError(Exception):
    """A trace file that cannot be read or does not follow the schema; the message names the file."""
