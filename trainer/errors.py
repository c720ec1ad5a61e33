"""Errors a user can act on: the CLI prints their one-line message and exits with code 2 (no traceback)."""


class TrainerError(Exception):
    """Base class; the message is one line naming the file or option and what to do."""


class FileFormatError(TrainerError):
    """A checkpoint or token file that is not what its header says (magic, version, size)."""


class NonFiniteError(TrainerError):
    """Loss or a gradient became NaN/inf; the message names the step and the kernel that produced it."""


class ConfigError(TrainerError, ValueError):
    """A configuration value out of range; `field` names the config field (the CLI maps it to its option)."""

    def __init__(self, field: str, value, requirement: str):
        super().__init__(f"{field} {value}: {requirement}")
        self.field, self.value, self.requirement = field, value, requirement
