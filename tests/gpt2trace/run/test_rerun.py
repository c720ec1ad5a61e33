"""gpt2trace.run.rerun: a trace's stored run configuration back into a RunConfig (the inverse of
runner.run_config_json), with settings changed by the names `gpt2trace run` gives its options; traces that cannot be
rerun. (Real reruns: tests/gpt2trace/cli/test_cli_rerun.py.)"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import META_RUN
from gpt2trace.run.rerun import RerunError, for_rank, rerun_config, stored_run
from gpt2trace.run.runner import run_config_json
from gpt2trace.testing import synthetic as syn
from trainer.config import DPSync, PPSchedule
from trainer.errors import ConfigError

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
NEW = Path("new.parquet")


@pytest.mark.parametrize("name", ["tiny_1thread", "tiny_2threads_accum2", "tiny_2ranks_allreduce",
                                  "tiny_2ranks_overlap", "small_2ranks_sp_contiguous", "small_2ranks_pp2_1f1b"])
def test_the_stored_configuration_comes_back_whole(name):
    stored = stored_run(SAMPLES / f"{name}.parquet")
    cfg = rerun_config(stored, {}, NEW)
    again = run_config_json(cfg, stored["model"]["num_parameters"])
    for part in ("model", "train", "parallel"):             # every value the trace stored, the same
        assert {k: again[part][k] for k in stored[part]} == stored[part]
    assert cfg.trace.path == NEW and (cfg.save, cfg.resume, cfg.metrics_json) == (None, None, None)
    assert cfg.data is None and cfg.init_from is None and cfg.network is None      # the built-in corpus


def test_settings_are_changed_by_the_run_options_names():
    stored = stored_run(SAMPLES / "tiny_2ranks_allreduce.parquet")
    cfg = rerun_config(stored, {"dp_sync": "overlap", "batch_size": "8", "ranks": "4", "pp": "2",
                                "pp_schedule": "gpipe", "pp_layers": "1,1", "recompute": "yes", "lr": "3e-4",
                                "flush_every": "0", "memory_every": "2",
                                "emulate_network": "nodes=2,link=10Gb/s,latency=5us"}, NEW)
    assert (cfg.parallel.dp_sync, cfg.parallel.ranks, cfg.parallel.pp, cfg.parallel.pp_schedule) == \
        (DPSync.overlap, 4, 2, PPSchedule.gpipe)
    assert (cfg.parallel.pp_layers, cfg.parallel.recompute, cfg.train.batch_size, cfg.train.lr) == \
        ((1, 1), True, 8, 3e-4)
    assert cfg.trace.flush_every_s == 0 and cfg.trace.memory_every_s == 2
    assert cfg.network.nodes == 2 and cfg.network.network.bandwidth_bps == 1.25e9
    assert (cfg.train.steps, cfg.train.seed, cfg.model.n_embd) == (6, 1337, 32)        # the rest as stored
    # a named model replaces the sizes, sizes beside it apply on top
    cfg = rerun_config(stored, {"model": "small", "n_layer": "2"}, NEW)
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.vocab_size) == (2, 128, 512)
    assert for_rank(cfg, 1, 2).parallel.rank == 1
    # a stored emulated network comes back as the run stored it (runner.run_config_json), `none` drops it
    emulated = rerun_config(stored, {"emulate_network": "nodes=2,link=1Gb/s,latency=50us"}, NEW)
    with_net = {**stored, "network": run_config_json(emulated, 0)["network"]}
    back = rerun_config(with_net, {}, NEW).network
    assert (back.nodes, back.network.bandwidth_bps, back.network.latency_ns, back.network.rooted) == \
        (2, 1.25e8, pytest.approx(50_000), "flat")
    assert rerun_config(with_net, {"emulate_network": "none"}, NEW).network is None


@pytest.mark.parametrize("changes,field,says", [
    ({"no_such": "1"}, "no_such", "is not a setting a rerun can change (settings: batch_size, data,"),
    ({"save": "x.bin"}, "save", "a rerun writes only its trace"),
    ({"steps": "many"}, "steps", "must be an integer"),
    ({"dp_sync": "fast"}, "dp_sync", "must be one of allreduce, reduce-bcast, overlap, zero1"),
    ({"recompute": "maybe"}, "recompute", "must be true or false"),
    ({"model": "d99"}, "model", "must be a model name (d12, d24, d36, d48, small, tiny)"),
    ({"emulate_network": "nodes=2"}, "emulate_network", "needs latency, link"),     # the emulation's own parser
    ({"batch_size": "0"}, "batch_size", "must be an integer >= 1"),                 # TrainConfig's own check
    # the stored sp 2 no longer fits: the config names it
    ({"ranks": "3"}, "sp", "must divide the 3 ranks"),
    ({"seq_len": "33"}, "seq_len", "must be a multiple of --sp 2"),
])
def test_bad_settings_name_what_they_are_about(changes, field, says):
    stored = stored_run(SAMPLES / "small_2ranks_sp_contiguous.parquet")       # 2 ranks, sp 2, T 1024
    with pytest.raises(ConfigError) as caught:
        rerun_config(stored, changes, NEW)
    assert caught.value.field == field and says in caught.value.requirement


def test_a_checkpoints_model_is_not_replaced_silently():
    stored = {**stored_run(SAMPLES / "tiny_1thread.parquet"), "init_from": "gpt2_124M.bin"}
    with pytest.raises(ConfigError, match="the model comes from the checkpoint gpt2_124M.bin"):
        rerun_config(stored, {"n_layer": "4"}, NEW)
    assert rerun_config(stored, {"n_layer": "4", "init_from": "none"}, NEW).model.n_layer == 4


def _with_run(tmp: Path, run: dict | None) -> Path:
    """The tiny sample's records under another run metadata (None: none)."""
    table = pq.read_table(SAMPLES / "tiny_1thread.parquet")
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != META_RUN}
    if run is not None:
        meta[META_RUN] = json.dumps(run).encode()
    path = tmp / "t.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    return path


def test_traces_that_cannot_be_rerun(tmp_path):
    stored = stored_run(SAMPLES / "tiny_1thread.parquet")
    with pytest.raises(RerunError, match="holds no run configuration .*only a trace written by `gpt2trace run`, or "
                                         "exported from one with its .gpt2trace.json, can be run again"):
        stored_run(_with_run(tmp_path, None))
    with pytest.raises(RerunError, match="is a synthetic trace"):
        path = tmp_path / "syn.parquet"
        syn.write(syn.generate(syn.SyntheticConfig()), path)
        stored_run(path)
    resumed = {**stored, "resume": "run.bin", "train": {**stored["train"], "start_step": 4}}
    with pytest.raises(RerunError, match="continued the checkpoint run.bin from step 4; rerun repeats runs that "
                                         "start at step 0"):
        stored_run(_with_run(tmp_path, resumed))
    (tmp_path / "garbage.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match="garbage.parquet: not a Parquet trace"):
        stored_run(tmp_path / "garbage.parquet")
