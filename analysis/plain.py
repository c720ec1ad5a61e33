"""Results as plain Python values for json.dumps: tables as lists of row dicts (or as columns), NumPy scalars
unwrapped, NaN / NA as None. Every section of `analysis.analyze`'s result is made of these."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def rows(df: pd.DataFrame) -> list[dict]:
    """The table's rows as plain dicts (what jsonable gives, column by column: a 100,000-row table in a fraction of
    the time of a per-cell walk)."""
    names = [str(c) for c in df.columns]
    cols = [_plain_column(df[c]) for c in df.columns]
    return Plain([dict(zip(names, values)) for values in zip(*cols)] if cols else [{} for _ in range(len(df))])


def columns(df: pd.DataFrame) -> dict[str, list]:
    """The table as {column: plain values}, for long tables of few columns."""
    return {str(c): Plain(_plain_column(df[c])) for c in df.columns}


class Plain(list):
    """Rows already made of plain values: the final jsonable pass over the result leaves them as they are."""


_PLAIN_TYPES = frozenset((str, int, bool, type(None)))      # what jsonable leaves as it is (a float may be NaN)


def _plain_column(col: pd.Series) -> list:
    if isinstance(col.dtype, pd.api.extensions.ExtensionDtype) and col.dtype.kind in "iub" and col.hasnans:
        # A nullable integer column with NAs (a kernel's layer, NA outside the blocks): ints and None, where its
        # to_numpy() gives floats with NaN on pandas 3 (a layer 7.0)
        return col.to_numpy(dtype=object, na_value=None).tolist()
    values = col.to_numpy()
    if values.dtype.kind in "iub":
        return values.tolist()
    if values.dtype.kind == "f":
        out = values.tolist()
        if not np.isfinite(values).all():
            out = [v if math.isfinite(v) else None for v in out]
        return out
    return [v if type(v) in _PLAIN_TYPES else jsonable(v) for v in values.tolist()]   # a call less per str


def jsonable(obj):
    """Plain Python values for json.dumps: NumPy scalars unwrapped, NaN / NA as None."""
    if isinstance(obj, Plain):
        return obj
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [v if type(v) in _PLAIN_TYPES else jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if obj is pd.NA or obj is None:
        return None
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def tables(found: dict | None) -> dict | None:
    """A dict of tables and values with every table as rows (None stays None: nothing to say)."""
    return {k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in found.items()} if found else None
