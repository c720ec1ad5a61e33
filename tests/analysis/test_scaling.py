import pandas as pd
import pytest

from analysis.scaling import modelfactors


def _result(runtime, steps, tokens_per_step, useful_avg, cpus, pe, ranks, threads):
    return {"trace": f"{ranks}x{threads}",
            "summary": {"steps": steps, "tokens_per_step": tokens_per_step, "ranks": ranks,
                        "threads_per_rank": threads},
            "pop": {"runtime_s": runtime, "useful_avg_s": useful_avg, "cpus": cpus, "parallel_efficiency": pe,
                    "load_balance": 1.0, "communication_efficiency": pe, "serialization_efficiency": pe,
                    "transfer_efficiency": 1.0}}


def test_modelfactors_per_token():
    ref = _result(10, 2, 100, 8, 1, 0.8, 1, 1)
    run = _result(6, 2, 200, 10, 2, 0.75, 2, 1)
    out = modelfactors([ref, run])
    # per token: ref 10 s / 200 = 0.05, run 6 / 400 = 0.015 -> speedup 10/3;
    # useful per token: ref 8 / 200 = 0.04, run 20 / 400 = 0.05 -> computation scalability 0.8;
    # global efficiency 0.75 x 0.8 = 0.6
    assert out.attrs["work_unit"] == "token"
    assert out["speedup"].tolist() == pytest.approx([1, 10 / 3])
    assert out["computation_scalability"].tolist() == pytest.approx([1, 0.8])
    assert out["global_efficiency"].tolist() == pytest.approx([0.8, 0.6])
    assert out[["processes", "threads"]].values.tolist() == [[1, 1], [2, 1]]


def test_modelfactors_per_step_without_tokens():
    out = modelfactors([_result(10, 2, None, 8, 1, 0.8, 1, 1), _result(5, 1, None, 4, 1, 0.8, 1, 1)])
    # 5 s per step both: speedup 1, computation scalability (8/2) / (4/1) = 1
    assert out.attrs["work_unit"] == "step"
    assert out["speedup"].tolist() == pytest.approx([1, 1])
    assert out["computation_scalability"].tolist() == pytest.approx([1, 1])


def test_hybrid_rows_take_the_mpi_level_and_show_openmp_and_statistics():
    ref = _result(10, 2, 100, 8, 1, 0.8, 1, 1)
    run = _result(6, 2, 200, 10, 4, 0.75, 2, 2)
    run["pop"].update(serialization_efficiency=None, transfer_efficiency=None,
                      mpi={"serialization_efficiency": 0.9, "transfer_efficiency": 0.95},
                      openmp={"serial_region_efficiency": 0.7, "region_efficiency": 0.96},
                      ideal_runtime_s=5.5, useful_total_s=40.0, useful_ideal_max_s=5.2)
    row = modelfactors([ref, run]).iloc[1]
    assert (row["serialization_efficiency"], row["transfer_efficiency"]) == (0.9, 0.95)
    assert (row["serial_region_efficiency"], row["region_efficiency"]) == (0.7, 0.96)
    assert (row["ideal_runtime_s"], row["useful_total_s"], row["useful_ideal_max_s"]) == (5.5, 40.0, 5.2)
    first = modelfactors([ref, run]).iloc[0]
    assert pd.isna(first["serial_region_efficiency"]) and pd.isna(first["ideal_runtime_s"])
