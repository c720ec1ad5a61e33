"""The schema is the one home of the trace's vocabulary: the trainer's phase and counter names are the schema's."""
from gpt2trace.format import schema as S
from gpt2trace.record.tracer import FLUSH_PHASE, RSS_COUNTER
from trainer import names


def test_the_trainers_phases_are_the_schemas():
    # The tracer adds its own flush phase; everything else is the training loop's.
    assert set(S.Phase.ALL) == set(names.PHASES) | {FLUSH_PHASE}
    assert len(S.Phase.ALL) == len(set(S.Phase.ALL))


def test_the_trainers_counters_are_the_schemas():
    # The tracer adds its own resident-memory counter; the per-step ones are the training loop's.
    assert S.Counter.PER_STEP == names.COUNTERS
    assert set(S.Counter.ALL) == set(names.COUNTERS) | {RSS_COUNTER}
    assert len(S.Counter.ALL) == len(set(S.Counter.ALL))


def test_compute_phases_are_phases():
    assert set(S.Phase.COMPUTE) <= set(S.Phase.ALL)


def test_mpi_states_are_states():
    assert all(isinstance(s, S.State) for s in S.MPI_STATES) and S.State.RUNNING not in S.MPI_STATES
