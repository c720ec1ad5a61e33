"""The order of an analysis' output rows: by a value, ties by columns that name the row.

Ties are common (kernels of no Synchronization, calls of equal time on each rank) and must not fall back on the
order rows arrive in: an exported and imported trace holds the same records in another order (another name
dictionary, lanes in another order), and its `analyze --json` lists must be the same lists.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def by_value(df: pd.DataFrame, value: str | Sequence[str], ties: Sequence[str], ascending: bool = False,
             ) -> pd.DataFrame:
    """`df` sorted by `value` (largest first unless `ascending`; missing values last), ties by `ties` in ascending
    order (missing first: a kernel's row of no layer before its layers' rows), with a fresh index. `value` may name
    several columns, all sorted the same way. A stable sort: rows equal in every key keep their order."""
    values = [value] if isinstance(value, str) else list(value)
    keys = []                                               # np.lexsort's: the last one sorts first
    for col in reversed([c for c in ties if c not in values]):
        keys.append(_codes(df[col]))                        # missing: -1, first
    for col in reversed(values):
        code = _codes(df[col])
        keys.append(np.where(code < 0, np.iinfo(np.int64).max, code if ascending else -code))
    if not keys or not len(df):
        return df.reset_index(drop=True)
    return df.iloc[np.lexsort(keys)].reset_index(drop=True)


def _codes(col: pd.Series) -> np.ndarray:
    """Each value's rank among the column's distinct values (equal values equal ranks), -1 for a missing one."""
    return pd.factorize(col, sort=True)[0].astype(np.int64)
