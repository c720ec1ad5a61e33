"""How much of a big trace a command holds at once (imports nothing, so the CLI can show it in its --help).

GROUP_RECORDS: the records of one group of ranks that `analyze`, `report` and `info` load at a time when a Parquet
trace is too big to load whole (gpt2trace.format.reader.rank_groups): about 250 bytes each at the peak of a group's
analysis, so ~1 GB; a rank with more records is a group of its own.

PRV_STREAM_BYTES: a Paraver trace bigger than this (as text, PRV_BYTES_PER_RECORD on the traces our export writes)
holds more than about GROUP_RECORDS records: `analyze` imports it rank by rank into a temporary Parquet trace
(gpt2trace.interop.paraver_stream) and reads that group by group, instead of importing it whole (~300 bytes per
record). A .prv.gz counts 8 bytes of text per byte (trace text compresses 6-10x).
"""
GROUP_RECORDS = 4_000_000
PRV_BYTES_PER_RECORD = 46
PRV_STREAM_BYTES = GROUP_RECORDS * PRV_BYTES_PER_RECORD
GZIP_TEXT_PER_BYTE = 8
