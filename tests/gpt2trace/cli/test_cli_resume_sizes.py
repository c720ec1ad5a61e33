"""`run --resume CK --n-layer 3`: a size option given with --resume is compared with the saved run's model, and the
one-line refusal names that dimension (not -T, which was not given, fitted to another model's context)."""
from __future__ import annotations

from tests.gpt2trace.cli.test_bad_input import assert_one_line_error
from tests.gpt2trace.cli.test_cli_run import _run, _saved


def test_a_size_option_against_the_saved_model_names_the_dimension(tmp_path):
    # saved: the tiny model (L=2, context 32) trained at T=32 (the default T of a run of the tiny model)
    ck = _saved(tmp_path, seq_len=32)
    r = _run("--resume", ck, "--n-layer", "3", "-B", "2", "--threads", "1", "--trace", tmp_path / "t.parquet")
    line = assert_one_line_error(r, f"--resume {ck} was saved by a run with other settings (--n-layer: saved 2, "
                                    "this run 3); resume with the saved run's settings")
    assert "-T" not in line.split(";")[0]
    assert not (tmp_path / "t.parquet").exists()
