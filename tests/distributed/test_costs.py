"""Per-unit CPU costs from heartbeats (`distributed/reporting.py`: `WorkCosts`)."""

import pytest

from hns_train.distributed.reporting import WorkCosts


def test_costs_divide_each_kinds_cpu_by_its_work_and_start_a_new_window():
    costs = WorkCosts(agents_per_frame=4)
    costs.add("actor", {"cpu_s": 0.5, "frames": 400})
    costs.add("actor", {"cpu_s": 0.3, "frames": 400})
    costs.add("policy", {"cpu_s": 1.6, "rows": 3200, "batches": 50, "forwards": 80})
    costs.add("trainer", {"cpu_s": 2.0, "samples": 4000, "new_samples": 1600})
    m = costs.metrics(elapsed_s=2.0)
    assert m["cpu/actor_ms_per_frame"] == pytest.approx(1.0)  # 0.8 s / 800 frames
    assert m["cpu/policy_us_per_row"] == pytest.approx(500.0)
    assert m["cpu/policy_ms_per_frame"] == pytest.approx(2.0)
    assert m["throughput/policy_rows_per_batch"] == pytest.approx(64.0)
    assert m["throughput/policy_rows_per_forward"] == pytest.approx(40.0)
    assert m["cpu/trainer_us_per_sample"] == pytest.approx(500.0)
    assert m["cpu/ms_per_frame"] == pytest.approx(1e3 * 4.4 / 800)
    assert m["throughput/trained_fps"] == pytest.approx(1600 / 4 / 2.0)
    assert costs.metrics(elapsed_s=1.0) == {"throughput/trained_fps": 0.0}


def test_a_kind_without_cpu_reports_gets_no_cpu_figure():
    costs = WorkCosts(agents_per_frame=2)
    costs.add("actor", {"frames": 100})  # serial launcher: no cpu_s
    costs.add("policy", {"cpu_s": 0.1, "rows": 0})
    m = costs.metrics(elapsed_s=1.0)
    assert "cpu/actor_ms_per_frame" not in m
    assert "cpu/policy_us_per_row" not in m  # no rows served: nothing to divide by
    assert m["cpu/policy_ms_per_frame"] == pytest.approx(1.0)
