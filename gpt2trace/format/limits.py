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

# --- what a number given on the command line may be: bounds that follow from what the code does with it -------
# (checked by gpt2trace.cli.limits, and by gpt2trace.format.network for bandwidths and latencies)

CLOCK_NS = 2**63 - 1                # timestamps and durations are int64 nanoseconds (schema START_NS, END_NS)
# A time in seconds becomes int64 ns and may be slept (time.sleep takes at most ~2**63 ns); half the clock leaves
# room for the trace's own timestamps to be added to it: ~146 years.
MAX_SECONDS = 2**62 / 1e9
MAX_LATENCY_NS = 2**62              # one latency, as MAX_SECONDS
MAX_ADDED_NS = 2**62                # what a what-if replay may add to a run (network costs, scaled kernels)
MIN_BANDWIDTH_BPS = 1e9 / 2**62     # one byte takes at most MAX_SECONDS
# The trace's integer columns: a step, a micro-step and a layer must fit them (schema STEP int32, MICROSTEP and
# LAYER int16), a rank too (RANK int32).
MAX_STEP = 2**31 - 1
MAX_MICROSTEPS = 2**15 - 1
MAX_LAYERS = 2**15 - 1
MAX_RANKS = 2**31 - 1
# Numba threads per core available: beyond a few per core a run only measures the OS scheduler, and every thread
# costs a stack, a pool slot and a lane in the trace; 64 per core is far past any useful oversubscription.
MAX_THREADS_PER_CORE = 64
# Parameters, gradients and AdamW moments are float32: a learning rate and a weight decay must be finite there and
# not round to zero.
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_TINY = 1.401298464324817e-45     # the smallest positive float32 (subnormal)
# An sgemm peak per core, in GFLOP/s: from a 1980s core's 1 MFLOP/s to 100 TFLOP/s (today's widest cores do a
# few hundred GFLOP/s in float32); outside it an MFU is meaningless.
PEAK_GFLOPS = (1e-3, 1e5)
