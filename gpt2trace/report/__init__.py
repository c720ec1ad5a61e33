"""HTML reports of a trace: a Paraver-like timeline with level of detail, and the analysis beside it.

    from gpt2trace.report import write
    write(load("trace.parquet"), "report.html")

Modules: `colors` (fixed colors per state / kernel / phase / MPI call), `lod` (dominant category per time bin),
`timeline` (views, exact records, detail window), `payload` (the page's data and its contract with the script)
and `pack` (data into the page), `figures` and `tables` (the charts and tables beside the timeline, drawn from
the analysis), `page` and `report.js` (the HTML and its JavaScript), `build` (all of it from a trace).
"""
from gpt2trace.report.build import Report, build, build_groups, write, write_file

__all__ = ["Report", "build", "build_groups", "write", "write_file"]
