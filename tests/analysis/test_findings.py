from analysis.analyze import analyze


def test_findings_order_slow_thread(slow_thread):
    # T = 10, P = 3 (30 thread-seconds). Serialization (T_ideal - max U) / T = (10 - 7) / 10 = 0.3;
    # serial sections 4 s x 2 idle threads / 30 = 0.2667; Synchronization in matmul_forward 5 / 30 = 0.1667;
    # load imbalance (7 - 17/3) / 10 = 0.1333, as much as matmul_forward's 4 thread-seconds lost / 30.
    # State profile (totals, largest first): Running 17, Idle 3 + 3 = 6 -> 0.2, Synchronization 3 + 2 = 5
    # -> 0.1667, Fork/Join 1 + 1 = 2 -> 0.0667 of the 30 thread-seconds.
    found = analyze(slow_thread)["findings"]
    assert [f["metric"] for f in found[:3]] == ["pop.serialization_efficiency", "occupancy.per_rank.serial_s",
                                                "states.totals[1]"]
    lost = {f["metric"]: f["lost_fraction"] for f in found}
    assert abs(lost["pop.load_balance"] - 4 / 30) < 1e-12 and abs(lost["imbalance[0]"] - 4 / 30) < 1e-12
    assert abs(lost["states.totals[1]"] - 6 / 30) < 1e-12 and abs(lost["states.totals[2]"] - 5 / 30) < 1e-12
    assert abs(lost["states.totals[3]"] - 2 / 30) < 1e-12
    assert abs(lost["occupancy.per_kernel[0].sync_s"] - 5 / 30) < 1e-12


def test_findings_late_rank_name_the_kernel(late_rank):
    texts = [f["text"] for f in analyze(late_rank)["findings"]]
    assert any("3 s of waits caused by kernel gelu_forward (layer 1) on rank 1" in t for t in texts)
