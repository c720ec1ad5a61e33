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
