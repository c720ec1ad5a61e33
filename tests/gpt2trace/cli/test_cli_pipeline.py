"""`gpt2trace analyze` on a pipeline trace: the bubble per stage against theory, the Late Sender waits and their
causes, communication per group, TFLOPS per core; in 80 columns, stages and ranks labelled, nothing cut. Without a
pipeline, no pipeline section."""
from __future__ import annotations

import json

import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp


@pytest.fixture(scope="module")
def pipeline_file(tmp_path_factory):
    """4 stages x 2 pipelines (ranks: stage x 2 + pipeline), 1F1B, 4 micro-batches, stage 1 twice as slow."""
    path = tmp_path_factory.mktemp("pp") / "pipeline.parquet"
    syn.write(sp.generate(sp.PipelineConfig(stages=4, pipelines=2, micro_batches=4, slow_stage=(1, 2.0),
                                            threads=2)), path)
    return path


def _analyze(app, *args, width: int = 80):
    r = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["analyze", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_pipeline_tables_fit_80_columns(app, pipeline_file):
    text = _analyze(app, pipeline_file, "--top", "50")
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80 and "…" not in text
    result = json.loads(_analyze(app, pipeline_file, "--json", "-"))
    pp = result["pipeline"]
    section = text[text.index("Pipeline bubble per stage"):text.index("Late Sender waits between stages")]
    # one row per stage with its ranks (stage 1 is ranks 2 and 3), its bubble next to the ideal 3/7 = 42.9%
    assert "ideal" in section and section.count("42.9%") == 4
    for row in pp["per_stage"]:
        ranks = ", ".join(map(str, row["ranks"]))
        assert f"│ {row['stage']}     │ {ranks}" in section
        assert f"{100 * row['bubble']:.1f}%" in section
    assert "ideal bubble (P-1)/(M+P-1)" in text and "4 x 2 (1f1b)" in text
    assert "stage imbalance, busy max/mean" in text and " 1.6 " in text     # 6 / 3.75 ms per micro-batch
    # the root causes name the slow stage's kernels, the late micro-batches and the stage that waited
    causes = text[text.index("Root causes: what the late stage computed"):]
    first = pp["causes"][0]
    assert first["sender_stage"] == 1 and first["kernel"] in causes
    for title in ("Communication per group", "TFLOPS per core, study's 2N x 3 formula", "TFLOPS per core executed"):
        assert title in text


def test_pipeline_json(app, pipeline_file):
    pp = json.loads(_analyze(app, pipeline_file, "--json", "-"))["pipeline"]
    assert (pp["stages"], pp["pipelines"], pp["micro_batches"], pp["schedule"]) == (4, 2, 4, "1f1b")
    assert pp["ranks"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert set(pp) == {"stages", "pipelines", "micro_batches", "schedule", "recompute", "ranks", "ideal_bubble",
                       "bubble", "of_step", "stage_imbalance", "late_sender_s", "per_stage", "per_step",
                       "late_senders", "causes"}
    assert pp["causes"][0]["text"].startswith("stage ")


def test_no_pipeline_no_section(app, trace_file):
    text = _analyze(app, trace_file)
    assert "Pipeline" not in text and "Late Sender waits between stages" not in text
    # the trace names no communicators, all ran on the world: the per-group table would repeat the MPI calls
    assert "Communication per group" not in text
    assert json.loads(_analyze(app, trace_file, "--json", "-"))["pipeline"] is None


def test_a_pipeline_without_a_whole_step_says_so(app, tmp_path):
    table = sp.generate(sp.PipelineConfig(stages=2, micro_batches=2, steps=1))
    syn.write(table.filter(pc.invert(pc.equal(table.column("name"), "backward"))), tmp_path / "cut.parquet")
    text = " ".join(_analyze(app, tmp_path / "cut.parquet").split())
    assert "No analyzed step holds a whole pipeline" in text and "Late Sender waits between stages" in text
    assert "│ 0 │ gradients of stage 1 │ 2 │" in text and "│ none │" in text
