"""Acceptance 1: our trace -> .prv -> import -> analyze gives what the original gives (POP, imbalance, waits and
everything else), on a real trace from the trainer and on 2-rank traces with MPI calls."""
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from analysis.analyze import analyze
from gpt2trace import load
from gpt2trace.format.reader import Trace
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver


def _same_analysis(original, exported_prv):
    a, b = analyze(load(original)), analyze(load(exported_prv))
    a.pop("trace"), b.pop("trace")
    for key in ("pop", "imbalance", "waits", "root_causes", "summary", "occupancy", "counters"):
        assert a[key] == b[key], key
    assert a == b


def test_real_trace_round_trip(tmp_path, real_trace):
    path = real_trace(threads=2, steps=3).path
    out = export_paraver(path, tmp_path / "real")
    _same_analysis(path, out.prv)
    imported = import_paraver(out.prv)
    assert imported.notes == ()
    assert imported.table.num_rows == load(path).num_rows
    original, back = load(path), Trace.from_table(imported.table)
    assert (back.run, back.machine, back.peak, back.clock) == (original.run, original.machine, original.peak,
                                                               original.clock)         # from NAME.gpt2trace.json


def test_synthetic_two_ranks_round_trip(tmp_path, synthetic_path):
    _same_analysis(synthetic_path, export_paraver(synthetic_path, tmp_path / "syn").prv)


def test_every_mpi_call_round_trips(tmp_path, mpi_zoo_path):
    out = export_paraver(mpi_zoo_path, tmp_path / "zoo.prv.gz", run_lines=40)     # gzip, external merge
    _same_analysis(mpi_zoo_path, out.prv)


def test_extrae_information_alone_rebuilds_the_mpi_calls(tmp_path, mpi_zoo_path):
    """Without our attributes (as Extrae writes traces), seq comes from the order on the communicator, peers from
    the root flag and the 3: record, bytes from the collective sizes: the POP factors and waits stay the same."""
    out = export_paraver(mpi_zoo_path, tmp_path / "zoo")
    text = re.sub(r":7100000[1-6]:-?\d+", "", out.prv.read_text())
    (tmp_path / "extrae.prv").write_text(text)
    (tmp_path / "extrae.pcf").write_text(out.pcf.read_text())
    original = analyze(load(mpi_zoo_path), steps="0:3")      # the import has no steps: its window is the run
    extrae = analyze(load(tmp_path / "extrae.prv"))
    assert extrae["pop"] == original["pop"]
    assert extrae["waits"] == original["waits"]


def test_analyze_json_from_the_cli_agrees(tmp_path, synthetic_path):
    from gpt2trace.cli.main import app
    out = export_paraver(synthetic_path, tmp_path / "syn")
    runner = CliRunner()
    a = json.loads(runner.invoke(app, ["analyze", str(synthetic_path), "--json", "-"]).stdout)
    b = json.loads(runner.invoke(app, ["analyze", str(out.prv), "--json", "-"]).stdout)
    for key in ("pop", "imbalance", "waits"):
        assert a[key] == b[key]
    assert b["pop"]["parallel_efficiency"] == pytest.approx(a["pop"]["parallel_efficiency"])


def _p2p(trace) -> list:
    """(rank, name, peer, bytes, tag) of the point-to-point calls, in rank order."""
    calls = trace.records("comm").sort_by([("rank", "ascending"), ("start_ns", "ascending")]).to_pylist()
    return [(c["rank"], c["name"], c["peer"], c["bytes"], c.get("tag")) for c in calls
            if c["name"] in ("MPI_Send", "MPI_Recv")]


@pytest.mark.parametrize("tag", [7, None])
def test_tags_round_trip(tmp_path, mpi_zoo_path, tag):
    """The zoo's MPI_Send 0 -> 1 and its MPI_Recv with tag 7, or with no tag: our attribute brings each call's
    tag back as it was (none stays none, though the 3: record says 0, Paraver's field needing a number)."""
    src = mpi_zoo_path
    if tag is None:
        table = pq.read_table(src)
        src = tmp_path / "untagged.parquet"
        pq.write_table(table.set_column(table.schema.get_field_index("tag"), "tag",
                                        pa.nulls(table.num_rows, pa.int32())), src)
    out = export_paraver(src, tmp_path / "zoo")
    message = [ln for ln in out.prv.read_text().splitlines() if ln.startswith("3:")]
    assert len(message) == 1 and message[0].endswith(f":1000:{tag or 0}")
    assert _p2p(load(out.prv)) == _p2p(load(src)) == [(0, "MPI_Send", 1, 1000, tag), (1, "MPI_Recv", 0, 1000, tag)]
    back = {c["name"]: c.get("tag") for c in load(out.prv).records("comm").to_pylist()}
    assert back["MPI_Bcast"] is None and back["MPI_Waitall"] is None          # collectives have no tag


def test_tags_of_an_extrae_trace_come_from_its_message_records(tmp_path, mpi_zoo_path):
    """Without our attributes and .pcf (as Extrae writes traces), the 3: record's tag (7) is the tag of the send and
    of the receive it connects."""
    out = export_paraver(mpi_zoo_path, tmp_path / "zoo")
    (tmp_path / "extrae.prv").write_text(re.sub(r":7100000[1-8]:-?\d+", "", out.prv.read_text()))
    assert _p2p(load(tmp_path / "extrae.prv")) == [(0, "MPI_Send", 1, 1000, 7), (1, "MPI_Recv", 0, 1000, 7)]


def test_counter_values_come_back_exactly(tmp_path):
    """The export scales our counters by 1e9 into integers; the import divides them back, which returns every value
    whose scaled form was exact (resident memory in bytes, whole pages, among them), where a multiplication by 1e-9
    was off in the last bit for some (503484416 came back as 503484416.00000006)."""
    import numpy as np

    from gpt2trace.testing import synthetic
    path = tmp_path / "rss.parquet"
    table = synthetic.generate(synthetic.SyntheticConfig(ranks=2, threads=2, steps=3, rss=True))
    # resident memory as a real run reads it: whole 4 KiB pages around 480 MiB
    pages = 503484416.0 + 4096.0 * np.arange(table.num_rows)
    value = np.where(table.column("kind").cast(pa.string()).to_numpy(zero_copy_only=False) == "counter", pages,
                     table.column("value").to_numpy(zero_copy_only=False))
    table = table.set_column(table.schema.get_field_index("value"), "value", pa.array(value, pa.float64()))
    synthetic.write(table, path)
    original = load(path).records("counter")
    assert original.num_rows
    back = Trace.from_table(import_paraver(export_paraver(path, tmp_path / "rss").prv).table).records("counter")
    key = ["rank", "start_ns", "name"]
    a = original.select([*key, "value"]).to_pandas().astype({"name": str}).sort_values(key, ignore_index=True)
    b = back.select([*key, "value"]).to_pandas().astype({"name": str}).sort_values(key, ignore_index=True)
    assert (a["value"].to_numpy() == b["value"].to_numpy()).all()
