"""Other tools' trace formats: Paraver (.prv/.pcf/.row, export and import) and Chrome's Trace Event JSON (export).

Each direction sits behind one function: `paraver_export.export_paraver`, `paraver_import.import_paraver` /
`load_paraver` (what `gpt2trace.load` calls for .prv files, the trace in memory), `paraver_stream.import_paraver_to`
(what `gpt2trace import` runs: rank by rank into a Parquet trace, bounded memory), `chrome_export.export_chrome`.
Around them:
  paraver_format    Extrae's event types and MPI call ids, our own event types, state colors (both directions)
  paraver_pcf       the .pcf and .row companions, written and read
  source, layout    exporters' input, read batch by batch, and its one cheap pre-pass
  validate          what the exports refuse, checked in that pre-pass before anything is written
  labels            names in formats that cannot hold any text: .pcf/.row escapes, Chrome's shortened long names
  linesort          the bounded-memory external sort that puts .prv lines in time order
  paraver_parse     the .prv text, scanned in large chunks by compiled code
  paraver_records   where imported records live (rank, thread, ns), their schema tables, the import's notes
  paraver_events    imported events as MPI calls, kernels, phases and counters
Nothing is imported here, so `import gpt2trace` stays light.
"""
