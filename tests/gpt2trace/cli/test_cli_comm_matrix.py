"""`gpt2trace analyze` prints the communication matrix's top pairs (a pipeline sample: activations one way,
gradients the other, the embedding group's allreduce both ways), in 80 columns; a trace without MPI prints none."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


def test_top_pairs_of_a_pipeline(app):
    r = CliRunner().invoke(app, ["analyze", str(SAMPLES / "small_2ranks_pp2_1f1b.parquet"), "--top", "3"],
                           env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("Communication matrix")))
    rows = [line for line in lines[at:at + 8] if line.startswith("│")]
    # analyzed steps 1-7: each way 4 micro-batches of 131,072 bytes a step (3,670,016) and the pp allreduce's 8
    # bytes a step (56), plus the last stage's 8-byte Bcast (56) from 1 to 0: 1 -> 0 3,670,128, 0 -> 1 3,670,072;
    # the embedding group's 262,144-byte allreduce 7 times: 1,835,008
    cells = [[c.strip() for c in row.split("│")[1:5]] for row in rows]
    assert cells == [["pp", "1 -> 0", "3,670,128", "42"], ["pp", "0 -> 1", "3,670,072", "35"],
                     ["embed", "0 -> 1", "1,835,008", "7"]]
    assert all(len(line) <= 80 for line in lines)


def test_no_mpi_no_matrix(app):
    r = CliRunner().invoke(app, ["analyze", str(SAMPLES / "tiny_2threads.parquet")], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "Communication matrix" not in r.stdout
