"""Random synthetic-trace configurations for the analyses' property tests (hypothesis)."""
from hypothesis import strategies as st

from gpt2trace.testing import synthetic


def configs(max_threads: int = 4, max_steps: int = 3) -> st.SearchStrategy[synthetic.SyntheticConfig]:
    """Up to 3 ranks, with noise, serial time, transfer time, a late rank and a slow thread drawn at random."""
    return st.builds(
        synthetic.SyntheticConfig,
        ranks=st.integers(1, 3), threads=st.integers(1, max_threads), steps=st.integers(1, max_steps),
        layers=st.integers(1, 2), seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5), allreduce=st.booleans(),
        serial_ns=st.integers(0, 300_000), transfer_ns=st.integers(0, 200_000),
        late_rank=st.one_of(st.none(), st.tuples(st.just(0), st.floats(1.0, 3.0))),
        slow_thread=st.one_of(st.none(), st.tuples(st.just(0), st.just(0), st.floats(1.0, 3.0))),
    )
