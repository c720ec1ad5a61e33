"""--metrics-json on a full disk: the whole lines written before the failed one stay under the final name."""
import json

import pytest

from gpt2trace.format.errors import OutputError
from gpt2trace.run.metrics import MetricsLog


def test_a_full_disk_keeps_the_whole_steps(small_fs):
    disk = small_fs(16)
    path = disk / "m.jsonl"
    log = MetricsLog(path)
    steps = 0
    with pytest.raises(OutputError) as err:
        while True:
            log.write({"step": steps, "pad": "x" * 1000})
            steps += 1
    assert f"cannot write --metrics-json {path}: No space left on device; it holds the {steps} step(s)" \
        in str(err.value)
    kept = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert kept == list(range(steps)) and steps > 0
    assert [p.name for p in disk.iterdir()] == ["m.jsonl"]       # no temporary left


def test_a_full_disk_before_any_step_leaves_nothing(small_fs):
    disk = small_fs(4)
    log = MetricsLog(disk / "m.jsonl")
    with pytest.raises(OutputError, match="nothing was written under that name"):
        log.write({"step": 0, "pad": "x" * 64 * 1024})
    assert list(disk.iterdir()) == []
