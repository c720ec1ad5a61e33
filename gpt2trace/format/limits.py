"""How much of a big trace a command holds at once (imports nothing, so the CLI can show it in its --help).

GROUP_RECORDS: the records of one group of ranks that `analyze`, `report` and `info` load at a time when a Parquet
trace is too big to load whole (gpt2trace.format.reader.rank_groups): about 250 bytes each at the peak of a group's
analysis, so ~1 GB; a rank with more records is a group of its own.
"""
GROUP_RECORDS = 4_000_000
