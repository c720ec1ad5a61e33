"""The launcher of `--schedule tasks`: each `run(kernel, layer, *args)` of the unchanged model code submits the
call's block tasks (trainer.tasks.tiling) and returns at once; `taskwait` runs them."""
from __future__ import annotations

import time
from collections.abc import Callable

from trainer.config import DEFAULT_TASK_BLOCK
from trainer.launcher import Launcher
from trainer.tasks.log import TaskLog
from trainer.tasks.runtime import Runtime
from trainer.tasks.tiling import tasks_of


class TaskLauncher(Launcher):
    """`observe`: called with the TaskLog of the tasks run by each taskwait (the tracer's `tasks`), if set."""

    def __init__(self, nthreads: int, task_block: int = DEFAULT_TASK_BLOCK):
        super().__init__(nthreads)
        if task_block < 1:
            raise ValueError("task_block must be >= 1")
        self.task_block = task_block
        self.runtime = Runtime(nthreads)
        self.observe: Callable[[TaskLog], None] | None = None

    def __call__(self, k, layer: int, *args) -> None:
        t0 = time.monotonic_ns()
        submit = self.runtime.submit
        for fn, targs, accesses, block in tasks_of(k, args, self.task_block):
            submit(fn, targs, accesses, k.name, layer, block)
        self.runtime.log.submit_cost_ns += time.monotonic_ns() - t0

    def taskwait(self) -> None:
        try:
            self.runtime.taskwait()
        finally:
            log = self.runtime.log.take()
            if self.observe is not None:
                self.observe(log)

    def close(self) -> None:
        self.runtime.close()
