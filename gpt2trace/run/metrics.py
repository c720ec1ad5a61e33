"""--metrics-json: one JSON object per step, written under a hidden temporary name and renamed at the end.

The temporary file (gpt2trace.format.outputs.temp_name, beside the final one) gets each step's line as the step
ends, so it can be followed while the run goes. It is renamed onto the final name when the run ends, whatever
ended it (finished, interrupted, stopped by an error): its lines are whole steps. A failed write (a full disk)
cuts it back to the lines written whole, renames those onto the final name (neither needs room) and raises an
OutputError saying how many steps it kept; a SIGKILL leaves it, holding the steps that ended.
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
        self._whole = self._steps = 0        # bytes and lines flushed whole
        self._do(lambda: setattr(self, "_file", open(self.tmp, "w", encoding="utf-8")))

    def write(self, metrics: dict) -> None:
        line = json.dumps(metrics) + "\n"
        self._do(lambda: (self._file.write(line), self._file.flush()))
        self._whole += len(line.encode())
        self._steps += 1

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
            raise OutputError(f"cannot write --metrics-json {self.path}: {exc.strerror or exc}; {self._keep()}") \
                from None

    def _keep(self) -> str:
        """Put the whole lines written before a failed write under the final name; say what it holds."""
        try:
            if self._steps:
                os.truncate(self.tmp, self._whole)
                os.replace(self.tmp, self.path)
                return f"it holds the {self._steps} step(s) written before"
        except OSError:
            pass
        with contextlib.suppress(OSError):
            self.tmp.unlink()
        return "nothing was written under that name"
