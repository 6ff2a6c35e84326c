"""`bench run` pieces that need no stack: a run's cost split by step from its Dagster events (the engine's CPU
between a step's start and end, the parts its materializations report, the checks as one line), the engine CPU
read between samples, the baseline's git worktree, and the options."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from streaming_pipeline.devstack.bench.run_cost import (
    CHECKS,
    CheckoutCosts,
    EngineCpu,
    _checkouts,
    _step_costs,
    on_each_lakehouse,
    ratio_pairs,
)
from streaming_pipeline.devstack.cli import build_parser
from streaming_pipeline.devstack.errors import BenchError


@dg.asset
def streamed() -> dg.MaterializeResult:
    time.sleep(0.3)
    return dg.MaterializeResult(
        metadata={"query_start_seconds": 0.125, "streaming_seconds": 0.25, "rows_read": 7, "reconcile_seconds": 0.5}
    )


@dg.multi_asset(specs=[dg.AssetSpec("left"), dg.AssetSpec("right")])
def two_tables():
    time.sleep(0.2)
    # A step writing two tables reports its one query with each: counted once.
    for name in ("left", "right"):
        yield dg.MaterializeResult(asset_key=name, metadata={"query_start_seconds": 1.5, "streaming_seconds": 2.0})


@dg.asset_check(asset=streamed)
def first_check() -> dg.AssetCheckResult:
    time.sleep(0.1)
    return dg.AssetCheckResult(passed=True)


@dg.asset_check(asset=streamed)
def second_check() -> dg.AssetCheckResult:
    time.sleep(0.1)
    return dg.AssetCheckResult(passed=True)


class FakeCpu(EngineCpu):
    """An engine that uses one CPU second per wall second from `start` on."""

    def __init__(self, start: float) -> None:
        super().__init__(pid=0)
        self.samples = [(start, 100.0), (start + 3600.0, 3700.0)]


def test_a_runs_steps_get_their_wall_engine_cpu_and_parts_and_the_checks_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    started = time.time()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = dg.materialize([streamed, two_tables, first_check, second_check], instance=instance)
        assert result.success
    costs = _step_costs(home, FakeCpu(started - 1.0))
    assert set(costs) == {"streamed", "two_tables", CHECKS}
    assert costs["streamed"].parts == {"query start": 0.125, "micro-batches": 0.25, "reconcile": 0.5}
    assert costs["two_tables"].parts == {"query start": 1.5, "micro-batches": 2.0}
    assert costs[CHECKS].parts == {}
    for name, least in (("streamed", 0.3), ("two_tables", 0.2), (CHECKS, 0.2)):
        cost = costs[name]
        assert least <= cost.wall_seconds < least + 5, name
        # one CPU second per second: the engine CPU of a step is its wall time
        assert cost.engine_cpu_seconds == pytest.approx(cost.wall_seconds, abs=0.002), name


def test_engine_cpu_between_samples_is_interpolated_and_held_beyond_them() -> None:
    cpu = EngineCpu(pid=0)
    cpu.samples = [(10.0, 1.0), (12.0, 2.0), (14.0, 6.0)]
    assert [cpu.at(t) for t in (9.0, 10.0, 11.0, 13.0, 14.0, 20.0)] == [1.0, 1.0, 1.5, 4.0, 6.0, 6.0]
    assert cpu.used() == 5.0


def test_the_engines_cpu_counts_the_children_it_has_reaped(tmp_path: Path) -> None:
    # A foreachBatch query's Python worker ends with its query: its CPU stays in the engine's count.
    child = "import time\nwhile time.process_time() < 0.5: pass"
    parent = f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {child!r}])\nprint(1, flush=True)\n"
    engine = subprocess.Popen([sys.executable, "-c", parent + "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout is not None and engine.stdout.readline().strip() == "1"  # the child ended, reaped
        assert EngineCpu(engine.pid).seconds() >= 0.5
    finally:
        engine.kill()
        engine.wait(timeout=30)


def test_a_baseline_is_a_git_worktree_of_the_ref_removed_afterwards(tmp_path: Path) -> None:
    with _checkouts(tmp_path, "HEAD") as checkouts:
        assert [c.label for c in checkouts] == ["this checkout", "baseline HEAD"]
        tree = Path(checkouts[1].root)
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
        assert (
            subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head
        )
        assert (tree / "pyproject.toml").is_file()
    assert not tree.exists()
    with pytest.raises(BenchError, match="--baseline-ref no-such-ref: git worktree add failed"):
        with _checkouts(tmp_path, "no-such-ref"):
            pass


def test_run_takes_one_size_and_its_own_defaults() -> None:
    args = build_parser().parse_args(["bench", "run", "--baseline-ref", "main"])
    assert (args.bench_command, args.baseline_ref, args.rides, args.runs) == ("run", "main", 200, 5)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "run", "--rides", "100", "200"])


def test_on_an_object_store_each_checkout_runs_on_the_store_and_on_the_local_disk() -> None:
    ours, base = CheckoutCosts("this checkout", "/a"), CheckoutCosts("baseline main", "/b")
    variants = on_each_lakehouse([ours, base])
    assert [(c.label, c.root, c.on_object_store) for c in variants] == [
        ("this checkout, object store", "/a", True),
        ("this checkout, local disk", "/a", False),
        ("baseline main, object store", "/b", True),
        ("baseline main, local disk", "/b", False),
    ]
    assert build_parser().parse_args(["bench", "run", "--object-store"]).object_store
    with pytest.raises(SystemExit):  # the other benchmarks measure on the local disk: refused before any stack starts
        build_parser().parse_args(["bench", "live", "--object-store"])


def test_each_ratio_compares_one_change_the_store_or_the_code() -> None:
    ours, base = CheckoutCosts("this checkout", "/a"), CheckoutCosts("baseline main", "/b")
    assert [(m.label, r.label) for m, r in ratio_pairs([ours, base])] == [("this checkout", "baseline main")]
    variants = on_each_lakehouse([ours, base])
    assert [(m.label, r.label) for m, r in ratio_pairs(variants)] == [
        ("this checkout, object store", "this checkout, local disk"),
        ("baseline main, object store", "baseline main, local disk"),
        ("this checkout, object store", "baseline main, object store"),
        ("this checkout, local disk", "baseline main, local disk"),
    ]
