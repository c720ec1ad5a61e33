"""Every command that reads a trace, given bad input or a bad output: exit code 2, exactly one line on stderr
(`error: ...`, naming the file or option), no traceback, every input file byte for byte as it was, and nothing
written. Then the names that must simply work (bytes that are not UTF-8, rich markup, emoji codes, NUL), and the
same through the console script in real processes.

Tables: COMMANDS x PARQUET_INPUTS (and x PRV_INPUTS for the commands that read Paraver traces), OUTPUT_CASES,
FULL_DISK, NAMES. `recover` and `run` are the record helper's commands: they get the generic file cases only.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

NOT_UTF8 = os.fsdecode(b"caf\xe9")          # 'caf\udce9': the é of a Latin-1 file name, not UTF-8


def invoke(app, *args):
    return CliRunner().invoke(app, [os.fspath(a) if isinstance(a, Path) else a for a in args])


def assert_one_line_error(r, *needles: str) -> str:
    """Exit 2, one `error:` line on stderr naming what it should, no exception escaped; returns the line."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exc_info)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --- inputs: every command that reads a trace x every kind of bad file ---------------------------------------

# name -> argv given the input path and an empty folder for outputs
COMMANDS = {
    "analyze": lambda t, out: ["analyze", t],
    "analyze --json": lambda t, out: ["analyze", t, "--json", out / "a.json"],
    "analyze --html": lambda t, out: ["analyze", t, "--html", out / "a.html"],
    "report": lambda t, out: ["report", t, "-o", out / "r.html"],
    "info": lambda t, out: ["info", t],
    "info --json": lambda t, out: ["info", t, "--json"],
    "export paraver": lambda t, out: ["export", t, "-o", out / "p"],
    "export chrome": lambda t, out: ["export", t, "-f", "chrome", "-o", out / "c"],
    "recover": lambda t, out: ["recover", t],
    "whatif --json": lambda t, out: ["whatif", t, "--json", out / "w.json"],
    "run --init-from": lambda t, out: ["run", "--init-from", t, "--steps", "1", "--no-trace"],
    "run --data": lambda t, out: ["run", "--data", t, "--steps", "1", "--no-trace"],
}
# Commands whose input is a Paraver trace, or that read one as well as Parquet.
PRV_COMMANDS = {
    "import": lambda t, out: ["import", t, "-o", out / "t.parquet"],
    **{k: v for k, v in COMMANDS.items() if k in ("analyze", "analyze --json", "report", "info", "export chrome")},
}


def _wrong_types(good: Path, path: Path) -> None:
    table = pq.read_table(good)
    pq.write_table(table.set_column(table.schema.get_field_index("rank"), "rank",
                                    pa.array(["a"] * table.num_rows)), path)


def _negative_threads(good: Path, path: Path) -> None:
    table = pq.read_table(good)
    pq.write_table(table.set_column(table.schema.get_field_index("thread"), "thread",
                                    pc.subtract(table.column("thread"), 1)), path)


# case -> (make(good trace, path), what the message says for the commands that read the file as a trace)
PARQUET_INPUTS = {
    "missing": (lambda good, p: None, "does not exist"),
    "directory": (lambda good, p: p.mkdir(), "is a directory"),
    "empty": (lambda good, p: p.write_bytes(b""), "not a Parquet file"),
    "garbage": (lambda good, p: p.write_bytes(bytes(range(256)) * 8), "not a Parquet file"),
    "truncated": (lambda good, p: p.write_bytes(good.read_bytes()[: good.stat().st_size // 2]), "not a Parquet file"),
    "wrong types": (_wrong_types, "column 'rank'"),
    "negative thread ids": (_negative_threads, "negative"),     # the reader and export say which column
}
# `info` reads the path itself (no Typer check) and says it in its own words.
INFO_WORDS = {"missing": "no such trace file"}
# Commands that do not read the file as a trace: only the generic guarantees are checked.
GENERIC_ONLY = ("recover", "run --init-from", "run --data")


@pytest.mark.parametrize("case", PARQUET_INPUTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_bad_parquet_input(app, tmp_path, trace_file, snapshot, command, case):
    make, message = PARQUET_INPUTS[case]
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir(), out.mkdir()
    path = inp / "trace.parquet"
    make(trace_file, path)
    before = snapshot(inp)
    r = invoke(app, *COMMANDS[command](path, out))
    if command.startswith("info"):
        message = INFO_WORDS.get(case, message)
    assert_one_line_error(r, *(["trace.parquet"] if command in GENERIC_ONLY else ["trace.parquet", message]))
    assert snapshot(inp) == before and list(out.iterdir()) == []
    assert command in GENERIC_ONLY or r.stdout == ""        # run prints its progress before it reads the file


def _prv_truncated(prv: Path, copy_prv) -> None:
    copy_prv(prv.parent)
    prv.write_bytes(prv.read_bytes()[: prv.stat().st_size // 2])      # cut in the middle of a line


def _prv_not_a_number(prv: Path, copy_prv) -> None:
    copy_prv(prv.parent)
    lines = prv.read_text().splitlines(keepends=True)
    lines[3] = "1:1:1:1:1:0:oops:1\n"
    prv.write_text("".join(lines))


# case -> (make(.prv path, copy_prv), message)
PRV_INPUTS = {
    "missing": (lambda p, copy: None, "does not exist"),
    "directory": (lambda p, copy: p.mkdir(), "is a directory"),
    "empty": (lambda p, copy: p.write_bytes(b""), "run.prv:1: not a Paraver header"),
    "garbage": (lambda p, copy: p.write_bytes(bytes(range(256)) * 8), "run.prv:1: not a Paraver header"),
    "truncated": (_prv_truncated, "wrong number of fields"),
    "wrong types": (_prv_not_a_number, "run.prv:4: field 7 (end) is not an integer"),
}


@pytest.mark.parametrize("case", PRV_INPUTS)
@pytest.mark.parametrize("command", PRV_COMMANDS)
def test_bad_paraver_input(app, tmp_path, copy_prv, snapshot, command, case):
    make, message = PRV_INPUTS[case]
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir(), out.mkdir()
    path = inp / "run.prv"
    make(path, copy_prv)
    before = snapshot(inp)
    r = invoke(app, *PRV_COMMANDS[command](path, out))
    if command.startswith("info"):
        message = INFO_WORDS.get(case, message)
    assert_one_line_error(r, "run.prv", message)
    assert snapshot(inp) == before and list(out.iterdir()) == []


# --- outputs: = an input, read-only, a directory, full disk ----------------------------------------------------

def _html_named_trace(tmp: Path, trace_file: Path, copy_prv) -> list:
    shutil.copy(trace_file, tmp / "weird.html")          # a Parquet trace whose name ends in .html
    return ["report", tmp / "weird.html"]                # default output: weird.html itself


def _linked(tmp: Path, trace_file: Path, copy_prv) -> list:
    (tmp / "link.json").symlink_to(tmp / "trace.parquet")
    return ["analyze", tmp / "trace.parquet", "--json", tmp / "link.json"]


def _json_named_trace(tmp: Path, trace_file: Path, copy_prv) -> list:
    shutil.copy(trace_file, tmp / "t.json")
    return ["export", tmp / "t.json", "-f", "chrome", "-o", tmp / "t"]       # writes t.json


# case -> (argv given the folder holding trace.parquet and run.prv/.pcf/.row/.gpt2trace.json, message)
OUTPUT_CASES = {
    "analyze --json = input": (lambda d, t, c: ["analyze", d / "trace.parquet", "--json", d / "trace.parquet"],
                               "--json"),
    "analyze --json = a link to the input": (_linked, "--json"),
    "analyze --html = input": (lambda d, t, c: ["analyze", d / "trace.parquet", "--html", d / "trace.parquet"],
                               "--html"),
    "analyze --json = the .pcf it reads": (lambda d, t, c: ["analyze", d / "run.prv", "--json", d / "run.pcf"],
                                           "--json"),
    "report -o = input": (lambda d, t, c: ["report", d / "trace.parquet", "-o", d / "trace.parquet"], "--output"),
    "report default output = input": (_html_named_trace, "the default output (-o)"),
    "import -o = the .prv": (lambda d, t, c: ["import", d / "run.prv", "-o", d / "run.prv"], "--output"),
    "import -o = the .pcf": (lambda d, t, c: ["import", d / "run.prv", "-o", d / "run.pcf"], "--output"),
    "import -o = the .row": (lambda d, t, c: ["import", d / "run.prv", "-o", d / "run.row"], "--output"),
    "export paraver onto its .prv": (lambda d, t, c: ["export", d / "run.prv", "-o", d / "run"], "--output"),
    "export paraver.gz onto its .pcf": (lambda d, t, c: ["export", d / "run.prv", "-o", d / "run.prv.gz"],
                                        "run.pcf"),
    "export chrome onto its input": (_json_named_trace, "--output"),
    "whatif --json = input": (lambda d, t, c: ["whatif", d / "trace.parquet", "--json", d / "trace.parquet"],
                              "--json"),
}


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_output_that_is_an_input(app, tmp_path, trace_file, copy_prv, snapshot, case):
    shutil.copy(trace_file, tmp_path / "trace.parquet")
    copy_prv(tmp_path)
    argv, option = OUTPUT_CASES[case]
    args = argv(tmp_path, trace_file, copy_prv)
    before = snapshot(tmp_path)
    r = invoke(app, *args)
    assert_one_line_error(r, option, "is also an input of this command")
    assert snapshot(tmp_path) == before          # nothing overwritten, nothing new


# name -> argv given the input trace (Parquet), its .prv, and the output folder
WRITERS = {
    "analyze --json": lambda t, prv, out: ["analyze", t, "--json", out / "a.json"],
    "analyze --html": lambda t, prv, out: ["analyze", t, "--html", out / "a.html"],
    "report": lambda t, prv, out: ["report", t, "-o", out / "r.html"],
    "export paraver": lambda t, prv, out: ["export", t, "-o", out / "p"],
    "export chrome": lambda t, prv, out: ["export", t, "-f", "chrome", "-o", out / "c"],
    "import": lambda t, prv, out: ["import", prv, "-o", out / "t.parquet"],
}


def _run_writer(app, base, trace_file, copy_prv, snapshot, command, out):
    """Runs a WRITERS command on copies of the traces in base/in, and checks that they are left as they were."""
    inp = base / "in"
    inp.mkdir(parents=True)
    shutil.copy(trace_file, inp / "trace.parquet")
    prv = copy_prv(inp)
    before = snapshot(inp)
    r = invoke(app, *WRITERS[command](inp / "trace.parquet", prv, out))
    assert snapshot(inp) == before
    return r


@pytest.mark.parametrize("command", WRITERS)
def test_unwritable_output(app, tmp_path, trace_file, copy_prv, snapshot, readonly_dir, command):
    r = _run_writer(app, tmp_path, trace_file, copy_prv, snapshot, command, readonly_dir)
    assert_one_line_error(r, str(readonly_dir), "Read-only file system")
    assert list(readonly_dir.iterdir()) == []


@pytest.mark.parametrize("command", WRITERS)
def test_output_in_a_missing_folder(app, tmp_path, trace_file, copy_prv, snapshot, command):
    r = _run_writer(app, tmp_path, trace_file, copy_prv, snapshot, command, tmp_path / "no" / "such")
    assert_one_line_error(r, "does not exist")


@pytest.mark.parametrize("command", ["analyze --json", "analyze --html", "report", "import"])
def test_output_that_is_a_directory(app, tmp_path, trace_file, copy_prv, snapshot, command):
    out = tmp_path / "out"
    out.mkdir()
    name = {"analyze --json": "a.json", "analyze --html": "a.html", "report": "r.html", "import": "t.parquet"}
    (out / name[command]).mkdir()
    r = _run_writer(app, tmp_path, trace_file, copy_prv, snapshot, command, out)
    assert_one_line_error(r, "is a directory")


@pytest.mark.parametrize("command", WRITERS)
def test_full_disk(app, tmp_path, trace_file, copy_prv, snapshot, small_fs, command):
    disk = small_fs(8)          # 8 KiB: every output here is bigger (the JSON ~20 KB, the page ~4.7 MB)
    r = _run_writer(app, tmp_path, trace_file, copy_prv, snapshot, command, disk)
    assert_one_line_error(r, "No space left on device")
    assert list(disk.iterdir()) == []       # no half-written file, no temporary one


@pytest.mark.parametrize("command", WRITERS)
def test_existing_output_is_replaced_and_said(app, tmp_path, trace_file, copy_prv, snapshot, command):
    out = tmp_path / "out"
    out.mkdir()
    first = _run_writer(app, tmp_path / "a", trace_file, copy_prv, snapshot, command, out)
    assert first.exit_code == 0 and "(replaced)" not in first.stdout, first.output
    written = snapshot(out)
    again = _run_writer(app, tmp_path / "b", trace_file, copy_prv, snapshot, command, out)
    assert again.exit_code == 0, again.output
    said = again.stdout.replace("\n", " ")
    for name in written:
        assert f"{name} (replaced)" in said, (name, said)
    assert set(snapshot(out)) == set(written)       # the same files, no temporary left


# --- options that used to end in a traceback ---------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["analyze", "{t}", "--peak-gflops", "inf"], "--peak-gflops inf: give the sgemm GFLOP/s per core"),
    (["analyze", "{t}", "--peak-gflops", "nan"], "--peak-gflops nan"),
    (["analyze", "{t}", "--peak-gflops", "-1"], "--peak-gflops -1.0"),
    (["analyze", "{t}", "--top", "abc"], "Invalid value for '--top'"),
    (["analyze", "{t}", "--steps", "x:y"], "--steps 'x:y'"),
    (["analyze", "{t}", "--no-such-option"], "No such option: --no-such-option"),
    (["analyze", "{t}", "--json", "{o}/a", "--html", "{o}/a"], "--json and --html both name"),
    (["report", "{t}", "-o", "{o}/r.html", "--window", "0:inf"], "--window '0:inf': A and B must be finite"),
    (["report", "{t}", "-o", "{o}/r.html", "--window", "nan:1"], "--window 'nan:1'"),
    (["report", "{t}", "-o", "{o}/r.html", "--window", "3:1"], "--window '3:1': needs 0 <= A < B"),
    (["report", "{t}", "-o", "{o}/r.html", "--exact-records", "10"], "Invalid value for '--exact-records'"),
    (["export", "{t}", "-o", "{o}/x", "--format", "svg"], "Invalid value for '--format'"),
    (["export", "{t}"], "Missing option '--output'"),
    (["import"], "Missing argument 'TRACE'"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["whatif", "{t}", "--bandwidth", "0"], "--bandwidth 0: a bandwidth must be positive"),
    (["whatif", "{t}", "--bandwidth", "-3GB/s"], "--bandwidth -3GB/s: a bandwidth must be positive"),
    (["whatif", "{t}", "--bandwidth", "10 parsecs"], "--bandwidth '10 parsecs': expected a number with one of"),
    (["whatif", "{t}", "--latency", "5 years"], "--latency '5 years': expected a number with one of"),
    (["whatif", "{t}", "--latency", "-1"], "--latency -1: a latency must be zero or positive"),
    (["whatif", "{t}", "--scale", "no_such_kernel=2"], "--scale no_such_kernel=...: no kernel 'no_such_kernel'"),
    (["whatif", "{t}", "--scale", "matmul_forward"], "--scale matmul_forward: expected KERNEL=FACTOR"),
    (["whatif", "{t}", "--scale", "matmul_forward=-1"], "--scale matmul_forward=-1: expected KERNEL=FACTOR"),
    (["whatif", "{t}", "--scale", "matmul_forward=nan"], "--scale matmul_forward=nan"),
    (["whatif", "{t}", "--steps", "7:9"], "--steps 7:9 selects no step"),
])
def test_bad_options(app, tmp_path, trace_file, snapshot, args, message):
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(trace_file.parent)
    r = invoke(app, *(a.format(t=trace_file, o=out) for a in args))
    assert_one_line_error(r, message)
    assert snapshot(trace_file.parent) == before and list(out.iterdir()) == []


# --- names that must work: bytes that are not UTF-8, markup, emoji codes, NUL ---------------------------------

def test_trace_names_that_are_not_utf8_work_everywhere(app, tmp_path, trace_file, copy_prv):
    trace = tmp_path / f"{NOT_UTF8}.parquet"
    shutil.copy(trace_file, trace)
    shown = "caf\ufffd"                                  # how the name prints
    for args, expect in ((["analyze", trace, "--top", "2"], f"{shown}.parquet"),
                         (["info", trace], f"{shown}.parquet"),
                         (["report", trace], f"/{shown}.html; "),
                         (["analyze", trace, "--json", tmp_path / f"{NOT_UTF8}.json"], f"/{shown}.json"),
                         (["export", trace, "-o", tmp_path / NOT_UTF8], f"{shown}.gpt2trace.json"),
                         (["import", tmp_path / f"{NOT_UTF8}.prv", "-o", tmp_path / f"{NOT_UTF8}-back.parquet"],
                          f"{shown}-back.parquet: 1,502 records")):
        r = invoke(app, *args)
        assert r.exit_code == 0 and r.exception is None, (args, r.output, r.exc_info)
        assert expect in r.stdout, (expect, r.stdout)
    assert (tmp_path / f"{NOT_UTF8}.html").is_file() and (tmp_path / f"{NOT_UTF8}-back.parquet").is_file()
    bad = tmp_path / f"{NOT_UTF8}-bad.parquet"
    bad.write_bytes(b"garbage")
    assert_one_line_error(invoke(app, "analyze", bad), f"{shown}-bad.parquet: not a Parquet file")


@pytest.mark.parametrize("width", [80, 200])
def test_names_from_the_trace_print_as_text(app, hostile_trace, width):
    # Kernel names with rich markup ([/] used to raise MarkupError, [i] vanished), an emoji code (:100: became an
    # emoji) and a NUL (printed raw), a host and CPU with markup: all print as they are, the NUL as \x00.
    r = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["analyze", str(hostile_trace.path), "--top", "50"])
    assert r.exit_code == 0, r.output
    for name in hostile_trace.kernels:
        assert name.replace("\x00", "\\x00") in r.stdout, name
    assert "\x00" not in r.stdout and "\N{HUNDRED POINTS SYMBOL}" not in r.stdout
    r = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["info", str(hostile_trace.path)])
    assert r.exit_code == 0, r.output
    assert hostile_trace.machine["hostname"] in r.stdout and hostile_trace.machine["cpu"] in r.stdout


def test_paths_with_markup_print_as_text(app, tmp_path, trace_file):
    folder = tmp_path / "[bold]runs[/]"               # "/" makes folders: [bold]runs[ / ] / ...
    trace = folder / ":100: node[/]01.parquet"
    (folder / ":100: node[").mkdir(parents=True)
    shutil.copy(trace_file, trace)
    r = invoke(app, "report", trace)
    assert r.exit_code == 0, r.output
    assert f"report: {folder}/:100: node[/]01.html" in r.stdout
    assert_one_line_error(invoke(app, "analyze", trace, "--peak-gflops", "0"), "--peak-gflops 0.0")
    (folder / "[").mkdir()
    (folder / "[/]bad.parquet").write_text("x")
    assert_one_line_error(invoke(app, "info", folder / "[/]bad.parquet"), f"{folder}/[/]bad.parquet: not a Parquet")


# --- the console script, in real processes ---------------------------------------------------------------------

def _script(*args: bytes | str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("gpt2trace")
    assert exe, "the gpt2trace console script is not on PATH (pip install -e .)"
    return subprocess.run([exe, *args], capture_output=True, cwd=cwd, env=dict(os.environ, COLUMNS="80"))


@pytest.mark.parametrize("args,message", [
    ([b"analyze", b"caf\xe9.parquet"], "error: Invalid value for 'TRACE': path 'caf\ufffd.parquet' does not exist."),
    ([b"info", b"caf\xe9.parquet"], "error: caf\ufffd.parquet: no such trace file"),
    ([b"analyze", b"bad[/].parquet"], "error: bad[/].parquet: not a Parquet file"),
    ([b"report", b"bad[/].parquet", b"-o", b"bad[/].parquet"], "error: --output bad[/].parquet is also an input"),
    ([b"export", b"bad[/].parquet", b"-o", b"x", b"-f", b"svg"], "error: Invalid value for '--format'"),
])
def test_console_script_errors(tmp_path, args, message):
    (tmp_path / "bad[").mkdir()
    (tmp_path / "bad[/].parquet").write_bytes(b"\x00:100:\n")
    before = (tmp_path / "bad[/].parquet").read_bytes()
    r = _script(*args, cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 2 and err.count("\n") == 1 and err.startswith(message), err
    assert "Traceback" not in err and r.stdout == b""
    assert (tmp_path / "bad[/].parquet").read_bytes() == before


def test_console_script_works_with_a_name_that_is_not_utf8(tmp_path, trace_file):
    shutil.copy(trace_file, tmp_path / os.fsdecode(b"caf\xe9.parquet"))
    r = _script(b"analyze", b"caf\xe9.parquet", b"--top", b"3", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert "caf\ufffd.parquet" in r.stdout.decode() and "Findings" in r.stdout.decode()


# --- numbers: every numeric option at its extremes -------------------------------------------------------------
# Each value is refused in one line naming the option (exit 2), or is legitimate and gives the right answer. The
# bounds follow from what the code does with the value (gpt2trace/format/limits.py says why): times fit the int64
# nanosecond clock and time.sleep, float32 parameters stay finite, counts fit the trace's integer columns.

EXTREMES = ("0", "-1", "1e-300", "1e300", str(2**63), "9" * 20, "nan", "inf")
BIG_INTS = (str(2**63), "9" * 20)
RUN_NUMBERS = ("-B", "-T", "--steps", "--lr", "--weight-decay", "--grad-accum", "--threads", "--ranks", "--tp",
               "--sp", "--pp", "--task-block", "--seed", "--save-every", "--flush-every", "--memory-every",
               "--n-layer", "--n-head", "--n-embd", "--vocab-size", "--max-seq-len", "--pp-layers")
# (option, value) a run takes: nothing to train (0 steps), lr/weight decay 0 or within float32 (2**63 ~ 9.2e18),
# any seed NumPy takes, a task as big as the kernel, never saving in between, flushing/sampling every step.
RUN_LEGIT = {("--steps", "0"), ("--lr", "0"), ("--weight-decay", "0"), ("--seed", "0"), ("--save-every", "0"),
             ("--flush-every", "0"), ("--flush-every", "1e-300"), ("--memory-every", "0"),
             ("--memory-every", "1e-300"),
             *((o, v) for o in ("--lr", "--weight-decay", "--task-block", "--seed") for v in BIG_INTS)}
# (option, value) -> what the line says instead of the option: the memory check names the model size (the bounds,
# checked before it, have none for these sizes)
RUN_WORDS = {(o, v): "lower -B/--batch-size, -T/--seq-len or the model size"
             for o in ("-B", "--n-embd", "--vocab-size", "--max-seq-len") for v in BIG_INTS}
RUN_WORDS[("--n-embd", "9" * 20)] = "must divide n_embd (99999999999999999999)"     # checked before the memory
# the values the issue list found, beyond the extremes: (argv after `run --model tiny`, what the line says)
RUN_FOUND = [
    (["--threads", "9" * 20], "--threads 99999999999999999999: at most"),
    (["--grad-accum", "40000"], "--grad-accum 40000: at most 32,767"),
    (["--n-layer", "40000", "--n-embd", "4", "--n-head", "1", "--vocab-size", "8"], "--n-layer 40000: at most 32,767"),
    (["--ranks", "1000"], "--ranks 1000: at most"),
    (["--lr", "1e308"], "--lr 1e+308: the parameters are float32"),
    (["--weight-decay", "1e308"], "--weight-decay 1e+308: the parameters are float32"),
    (["--lr", "1e30", "--weight-decay", "1e30"], "--weight-decay 1e+30: times --lr 1e+30 it exceeds float32"),
    (["--lr", "1e-300"], "--lr 1e-300: rounds to 0 in float32"),
    (["--flush-every", "1e300"], "--flush-every 1e+300: give a number of seconds from 0 to"),
    (["--memory-every", "1e300"], "--memory-every 1e+300: give a number of seconds from 0 to"),
    (["--ranks", "2", "--emulate-network", "nodes=2,link=1e-300Gb/s,latency=5us"], "link 1e-300Gb/s: give at least"),
    (["--ranks", "2", "--emulate-network", "nodes=2,link=10Gb/s,latency=1e300"], "latency 1e300: give at most"),
    (["--ranks", "2", "--emulate-network", "nodes=2,link=1e-9B/s,latency=5us"],
     "an allreduce of the 138,752 bytes of gradients would be held"),
    (["--ranks", "2", "--emulate-network", "nodes=3,link=10Gb/s,latency=5us"], "nodes=3 for 2 rank(s)"),
    (["--ranks", "2", "--emulate-network", f"nodes={2**63},link=10Gb/s,latency=5us"], f"nodes={2**63} for 2 rank"),
    (["--ranks", "2", "--emulate-network", "nodes=1,link=10Gb/s,latency=5us,nodes=2"], "nodes given more than once"),
    (["--ranks", "2", "--emulate-network", "nodes=2,link=10Gb/s,link=1Gb/s,latency=5us"],
     "--emulate-network nodes=2,link=10Gb/s,link=1Gb/s,latency=5us: link given more than once; give each key once"),
]


@pytest.fixture
def no_training(monkeypatch):
    """`run` up to the point where it would train or start mpiexec; returns the list of what it would have done."""
    import gpt2trace.cli.run as run_cli
    import gpt2trace.run.runner as runner
    done = []
    monkeypatch.setattr(run_cli, "_train", lambda cfg, rank, checked=None: done.append("train"))
    monkeypatch.setattr(run_cli, "_launch_ranks", lambda *a, **k: done.append("launch"))
    monkeypatch.setattr(runner, "prepare_process", lambda *a, **k: None)
    return done


def _run_numbers():
    for option in RUN_NUMBERS:
        for value in EXTREMES:
            yield pytest.param([option, value], None if (option, value) in RUN_LEGIT else
                               RUN_WORDS.get((option, value), option),
                               id=f"{option} {value}")
    for args, message in RUN_FOUND:
        yield pytest.param(args, message, id=" ".join(args))


@pytest.mark.parametrize("args,message", _run_numbers())
def test_run_numbers(app, tmp_path, no_training, args, message):
    r = invoke(app, "run", "--model", "tiny", "--threads", "1", "--trace", tmp_path / "t.parquet", *args)
    if message is None:
        assert r.exit_code == 0 and no_training, (r.output, r.exc_info)
    else:
        assert_one_line_error(r, message)
        assert no_training == [] and list(tmp_path.iterdir()) == []


# (argv with {t} the trace, {o} an output folder) -> the message, or None: legitimate, exit 0
TRACE_NUMBERS = {
    **{(cmd, opt, v): f"Invalid value for '{opt}'"
       for cmd in ("analyze", "report") for opt in ("--top", "--group-records")
       for v in ("0", "-1", "1e-300", "1e300", "nan", "inf")},
    **{("report", "--exact-records", v): "Invalid value for '--exact-records'"
       for v in ("0", "-1", "1e-300", "1e300", "nan", "inf")},
    **{("analyze", "--peak-gflops", v): f"--peak-gflops {float(v)}: give the sgemm GFLOP/s per core"
       for v in EXTREMES},
    **{("report", "--window", f"0:{v}"): f"--window '0:{v}'" for v in EXTREMES if v != "1e-300"},
    **{("report", "--window", f"{v}:{2**63}"): f"--window '{v}:{2**63}'" for v in EXTREMES},
    **{("whatif", "--bandwidth", v): f"--bandwidth {v}" for v in ("0", "-1", "1e-300")},
    ("whatif", "--bandwidth", "nan"): "--bandwidth 'nan'",
    **{("whatif", "--latency", v): f"--latency {v}" for v in ("-1", "1e300", *BIG_INTS)},
    **{("whatif", "--latency", v): f"--latency '{v}'" for v in ("nan", "inf")},
    **{("whatif", "--scale", f"matmul_forward={v}"): f"--scale matmul_forward={v}"
       for v in ("-1", "nan", "inf")},
    **{("whatif", "--scale", f"matmul_forward={v}"): "the scaled kernels would add"
       for v in ("1e300", *BIG_INTS)},
    **{("whatif", "--cluster", f"nodes={v},link=10Gb/s,latency=5us"): f"--cluster nodes={v}" for v in EXTREMES},
    **{("whatif", "--cluster", f"nodes=2,link={v},latency=5us"): f"--cluster nodes=2,link={v},"
       for v in ("0", "-1", "1e-300", "1e300", "nan", "inf")},
    **{("whatif", "--cluster", f"nodes=2,link=10Gb/s,latency={v}"): f"--cluster nodes=2,link=10Gb/s,latency={v}:"
       for v in ("-1", "1e300", *BIG_INTS, "nan", "inf")},
    ("whatif", "--cluster", "nodes=2,link=1Gb/s,latency=5us,link=2Gb/s"): "link given more than once",
    ("whatif", "--bandwidth", "1e-9"): None,            # a slow network: the step takes days, as predicted
    # legitimate: every row, the whole trace at once, every record exact, an instant or infinite network
    ("analyze", "--top", str(2**63)): None,
    ("report", "--exact-records", "9" * 20): None,
    ("report", "--window", "0:1e-300"): None,
    ("whatif", "--bandwidth", "inf"): None,
    ("whatif", "--latency", "1e-300"): None,
    ("whatif", "--scale", "matmul_forward=1e-300"): None,
}
# the cluster's nodes are refused above for the synthetic trace's 2 ranks: nodes=2 is the legitimate case
TRACE_NUMBERS[("whatif", "--cluster", "nodes=2,link=10Gb/s,latency=5us")] = None


@pytest.mark.parametrize("command,option,value", TRACE_NUMBERS, ids=[" ".join(k) for k in TRACE_NUMBERS])
def test_trace_command_numbers(app, tmp_path, trace_file, command, option, value):
    message = TRACE_NUMBERS[(command, option, value)]
    out = ["-o", tmp_path / "r.html"] if command == "report" else []
    r = invoke(app, command, trace_file, *out, option, value)
    if message is None:
        assert r.exit_code == 0 and r.exception is None, (r.output, r.exc_info)
    else:
        assert_one_line_error(r, message)
        assert list(tmp_path.iterdir()) == []


def test_whatif_predicts_a_slow_network_and_a_scaled_kernel_as_slower(app, trace_file):
    # an int64 overflow used to predict the step 70% faster with matmul_forward x 1e300; x 1e9 must be slower
    for args in (["--bandwidth", "1e-9"], ["--scale", "matmul_forward=1e9"]):
        r = invoke(app, "whatif", trace_file, *args, "--json", "-")
        assert r.exit_code == 0, r.output
        step = json.loads(r.stdout)["step_time_s"]
        assert step["predicted"] > 1000 * step["measured"], (args, step)


# --- empty traces and export names ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def empty_trace(tmp_path_factory, trace_file) -> Path:
    """The synthetic trace's schema and metadata with no rows."""
    path = tmp_path_factory.mktemp("empty") / "empty.parquet"
    table = pq.read_table(trace_file)
    pq.write_table(table.slice(0, 0), path)
    return path


@pytest.mark.parametrize("command", ["analyze", "report", "info", "whatif", "export paraver", "export chrome"])
def test_an_empty_trace_is_one_line(app, tmp_path, empty_trace, command):
    args = {"report": ["-o", tmp_path / "r.html"], "export paraver": ["-o", tmp_path / "p"],
            "export chrome": ["-f", "chrome", "-o", tmp_path / "c"]}.get(command, [])
    r = invoke(app, *command.split()[:1], empty_trace, *args)
    assert_one_line_error(r, "empty.parquet", "the trace is empty")
    assert list(tmp_path.iterdir()) == []


# -o NAME given the output folder (which holds a folder `adir`) -> what the line says
EXPORT_NAMES = {
    "": "--output '': give a name",
    " ": "--output ' ': give a name",
    "{o}/adir/": "names a folder, not a file",
    "{o}/adir": "names a folder, not a file",
    "{o}/.": "names a folder, not a file",
    "{o}/adir/..": "names a folder, not a file",
}


@pytest.mark.parametrize("fmt,suffix", [("paraver", ".prv"), ("chrome", ".json")])
@pytest.mark.parametrize("name", [*EXPORT_NAMES, "{o}/adir/SUFFIX"])
def test_export_name_that_is_no_file(app, tmp_path, trace_file, monkeypatch, fmt, suffix, name):
    out = tmp_path / "out"
    (out / "adir").mkdir(parents=True)
    monkeypatch.chdir(out)                  # an empty name would have written .prv, .pcf, ... here
    message = EXPORT_NAMES.get(name, f"no name before {suffix}")
    r = invoke(app, "export", trace_file, "-f", fmt, "-o", name.format(o=out).replace("SUFFIX", suffix))
    assert_one_line_error(r, message)
    assert [p.name for p in out.rglob("*")] == ["adir"]


def test_otf2_export_to_a_read_only_folder_names_the_users_path(app, trace_file, readonly_dir):
    r = invoke(app, "export", trace_file, "-f", "otf2", "-o", readonly_dir / "archive")
    line = assert_one_line_error(r, f"--output {readonly_dir}/archive: cannot write in {readonly_dir}",
                                 "Read-only file system")
    assert ".tmp-" not in line


def test_a_non_finite_loss_on_two_ranks_is_one_line_per_rank(tmp_path):
    # each rank used to print its line, then an UnboundLocalError traceback (MPI_Abort returned before the process
    # was killed) and "kept step 0 as parts", which the launcher's merge contradicted: 92 lines in all
    trace = tmp_path / "t.parquet"
    r = _script("run", "--model", "tiny", "--ranks", "2", "--threads", "1", "--steps", "3", "--lr", "1e30",
                "--trace", str(trace), cwd=tmp_path)
    err = r.stderr.decode().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr.decode(), r.stderr.decode()
    ranks = sorted(line for line in err if line.startswith("error: rank "))
    assert len(ranks) == 2 and len(err) == 3, err
    for rank, line in enumerate(ranks):
        assert line == (f"error: rank {rank}: step 1: the loss is not finite; NaN/inf first appears in kernel "
                        "matmul_forward (layer 0); lower --lr or check the input data"), line
    assert err[-1].startswith(f"the job ended with mpiexec exit code 2; each rank's whole steps are kept in {trace} "
                              "(step 0 on the ranks that got furthest"), err
    assert trace.is_file() and not list(tmp_path.glob("*.parts"))
