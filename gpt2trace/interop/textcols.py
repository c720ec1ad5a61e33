"""Arrow string kernels shared by the text exporters: whole columns become lines, no Python per record."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def as_text(values) -> pa.Array:
    """Any array, chunked array or sequence as a string Array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return pc.cast(values if isinstance(values, pa.Array) else pa.array(values), pa.string())


def join(*parts) -> pa.Array:
    """Concatenate string columns and scalars element-wise (nulls skipped)."""
    out = pc.binary_join_element_wise(*parts, "", null_handling="skip")
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out
