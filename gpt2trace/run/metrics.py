"""--metrics-json: one JSON object per step, written under a hidden temporary name and renamed at the end.

The temporary file (gpt2trace.format.outputs.temp_name, beside the final one) gets each step's line as the step
ends, so it can be followed while the run goes. It is renamed onto the final name when the run ends, whatever
ended it (finished, interrupted, stopped by an error): its lines are whole steps. A failed write (a full disk)
removes it and raises an OutputError; a SIGKILL leaves it, holding the steps that ended.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gpt2trace.format.errors import OutputError
from gpt2trace.format.outputs import temp_name


class MetricsLog:
    def __init__(self, path: Path):
        self.path, self.tmp = Path(path), temp_name(Path(path))
        self._file = None
        self._do(lambda: setattr(self, "_file", open(self.tmp, "w", encoding="utf-8")))

    def write(self, metrics: dict) -> None:
        line = json.dumps(metrics) + "\n"
        self._do(lambda: (self._file.write(line), self._file.flush()))

    def close(self) -> None:
        """Rename the lines written so far onto the final name."""
        def finish():
            self._file.close()
            os.replace(self.tmp, self.path)
        if self._file is not None and not self._file.closed:
            self._do(finish)

    def _do(self, action) -> None:
        try:
            action()
        except OSError as exc:
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
            with contextlib.suppress(OSError):
                self.tmp.unlink()
            raise OutputError(f"cannot write --metrics-json {self.path}: {exc.strerror or exc}; nothing was "
                              "written under that name") from None
