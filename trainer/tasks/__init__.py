"""`--schedule tasks`: the model's kernel calls cut into block tasks with data dependencies, run by a task runtime
(OmpSs-2 style) with no barrier between kernels; gradient reductions are communication tasks (TAMPI style).

    regions   dependencies from the memory regions tasks declare (in/out/inout)
    runtime   workers, ready queue, taskwait, communication tasks tested by the main thread
    tiling    how each kernel call is cut into blocks
    launcher  TaskLauncher: the model's `run(kernel, layer, *args)` submits the tasks of the call
    sync      TaskSync: the data-parallel strategy whose reductions and AdamW are tasks
    log       TaskLog: what the tracer takes after each taskwait
"""
