"""`gpt2trace whatif` on the CLI tests' synthetic trace (2 ranks, rank 1 late): the table, --json, and its output
guarantees; bad options are rows of test_bad_input.py."""
import json

from tests.gpt2trace.cli.test_bad_input import assert_one_line_error, invoke


def test_table_fits_80_columns_and_says_the_model(app, trace_file, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke(app, "whatif", trace_file, "--bandwidth", "10Gb/s", "--latency", "5", "--balance",
               "--scale", "matmul_forward=0.5")
    assert r.exit_code == 0, r.output
    assert "network 1.25 GB/s, latency 5 us, balanced, scaled: matmul_forward x0.5" in r.stdout
    for row in ("step time (median)", "runtime", "load balance", "serialization", "transfer"):
        assert row in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_json_to_stdout_and_to_a_file(app, trace_file, tmp_path):
    r = invoke(app, "whatif", trace_file, "--balance", "--json", "-")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    # The synthetic trace's rank 1 computes 1.5x longer in step 1: balanced, the load balance is 1 exactly, and
    # the prediction is faster than the run. The ideal network (no --bandwidth) shows as null (infinite).
    assert out["pop"]["predicted"]["load_balance"] == 1.0
    assert out["step_time_s"]["predicted"] < out["step_time_s"]["measured"]
    assert out["model"]["bandwidth_GBps"] is None and out["model"]["latency_us"] == 0
    r = invoke(app, "whatif", trace_file, "--json", tmp_path / "w.json")
    assert r.exit_code == 0 and f"JSON: {tmp_path / 'w.json'}" in r.stdout.replace("\n", "")
    assert json.loads((tmp_path / "w.json").read_text())["trace"] == str(trace_file)


def test_json_on_a_full_disk_leaves_nothing(app, trace_file, small_fs):
    disk = small_fs(4)
    (disk / "filler").write_bytes(b"x" * 3072)          # ~1 KB left: the JSON (~2.5 KB) does not fit
    r = invoke(app, "whatif", trace_file, "--json", disk / "w.json")
    assert_one_line_error(r, "No space left on device")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_a_clusters_link_must_be_finite_and_the_message_says_so(app, trace_file):
    # --bandwidth inf is the ideal network; an emulated cluster's link holds the ranks for its cost, so it must
    # be finite, and no message for --cluster offers "inf" as an example
    for link, says in (("inf", "link inf: give a finite bandwidth (for example 10Gb/s)"),
                       ("0", "link 0: a bandwidth must be positive and finite (for example 10Gb/s)"),
                       ("-2Gb/s", "link -2Gb/s: a bandwidth must be positive and finite (for example 10Gb/s)")):
        r = invoke(app, "whatif", trace_file, "--cluster", f"nodes=2,link={link},latency=5us")
        assert "inf)" not in assert_one_line_error(r, f"--cluster nodes=2,link={link},latency=5us: {says}")
    r = invoke(app, "whatif", trace_file, "--bandwidth", "inf", "--json", "-")
    assert r.exit_code == 0 and json.loads(r.stdout)["model"]["bandwidth_GBps"] is None


def test_the_critical_paths_are_side_by_side(app, trace_file, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = invoke(app, "whatif", trace_file, "--balance")
    assert r.exit_code == 0, r.output
    table = r.stdout[r.stdout.index("Critical path (the predicted run's largest items)"):]
    assert "on the path" in table and "│ length " in table and "before" in table and "after" in table
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    out = json.loads(invoke(app, "whatif", trace_file, "--balance", "--json", "-").stdout)
    paths = out["critical_path"]
    # each path tiles its run: the measured one the trace's window, the predicted one the replay
    assert paths["measured"]["length_s"] == out["runtime_s"]["measured"]
    assert abs(paths["predicted"]["length_s"] - out["runtime_s"]["predicted"]) < 1e-9
    assert {"items", "phases", "lanes", "steps", "per_step"} <= set(paths["predicted"])
