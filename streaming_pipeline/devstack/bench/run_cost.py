"""`streaming-pipeline bench run`: what one whole run costs on the warm engine.

After N new rides (and a tenth as many pickups), one run of every asset and check, as a user starts it
(`dagster asset materialize --select '*'`, a process of its own, over Spark Connect), repeated. Each run's wall
time and the engine's CPU seconds (the Connect server and its Python workers, live or ended), split by step from
the run's Dagster events, and inside a streaming step by what its materialization reports: starting the query,
its micro-batches, the windows' reconcile. The checks are summed as one line.

`--baseline-ref REF` measures a second checkout (a git worktree of REF) in the same run: both read the same new
rides, on the same stack and engine, each into a lakehouse and a Dagster instance of its own, in alternating
order, so that the ratio compares code, not machines or moments.

`--object-store` gives the bench's stack an S3-compatible object store (`stack up --object-store`) and measures
each checkout twice per round: with its lakehouse on the store, and on the local disk as the reference, so that
the ratio is what the store costs a run. The engine's CPU is the Connect server's; the store's own server is not
counted (on AWS it is not the user's machine).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from streaming_pipeline.devstack.bench.common import (
    bench_stack,
    bench_stage,
    cpu_seconds,
    machine_description,
    process_tree,
    say,
)
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.devstack.producer import produce, produce_zone_lookup, rows_from_records
from streaming_pipeline.devstack.synthetic import DEFAULT_START, SyntheticOptions, synthetic_pickups, synthetic_rides
from streaming_pipeline.lakehouse.tables import PICKUPS_TOPIC, RIDES_TOPIC

#: What a streaming step's materialization reports of its time, and the name the bench gives it.
STEP_PARTS = {
    "query_start_seconds": "query start",
    "streaming_seconds": "micro-batches",
    "reconcile_seconds": "reconcile",
}
CHECKS = "checks"
PROJECT_ROOT = Path(__file__).resolve().parents[3]


@dataclass
class StepCost:
    wall_seconds: float
    engine_cpu_seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # STEP_PARTS, summed over the step's tables


@dataclass
class RunCost:
    wall_seconds: float
    engine_cpu_seconds: float
    steps: dict[str, StepCost]


@dataclass
class CheckoutCosts:
    label: str
    root: str
    on_object_store: bool = False
    runs: list[RunCost] = field(default_factory=list)

    def median(self, figure: str) -> float:
        return statistics.median(getattr(run, figure) for run in self.runs)

    def step_median(self, step: str, figure: str) -> float:
        return statistics.median(getattr(run.steps[step], figure) if step in run.steps else 0.0 for run in self.runs)

    def part_median(self, step: str, part: str) -> float | None:
        values = [run.steps[step].parts[part] for run in self.runs if part in run.steps.get(step, StepCost(0, 0)).parts]
        return statistics.median(values) if values else None


@dataclass
class RunCostResult:
    rides: int
    repeat: int
    machine: str
    checkouts: list[CheckoutCosts]


class EngineCpu:
    """The engine's CPU seconds, sampled every `every` seconds in a thread: the process tree's user and system time,
    with the time of the children it has reaped (a foreachBatch query's Python worker ends with its query)."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-cpu", daemon=True)

    def __enter__(self) -> EngineCpu:
        self.samples.append((time.time(), self.seconds()))
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self.seconds()))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append((time.time(), self.seconds()))

    def seconds(self) -> float:
        return cpu_seconds(process_tree(self.pid), reaped_children=True)

    def at(self, moment: float) -> float:
        """The CPU seconds at `moment` (a Unix time), interpolated between the samples around it."""
        before = max((s for s in self.samples if s[0] <= moment), default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= moment), default=self.samples[-1])
        if after[0] == before[0]:
            return before[1]
        return before[1] + (after[1] - before[1]) * (moment - before[0]) / (after[0] - before[0])

    def used(self) -> float:
        return self.samples[-1][1] - self.samples[0][1]


def run_cost_bench(
    rides: int,
    repeat: int,
    json_path: Path | None,
    *,
    baseline_ref: str | None = None,
    stack_dir: Path | None = None,
    object_store: bool = False,
) -> RunCostResult:
    """`repeat` measured runs after `rides` new rides each (and a warm-up run), of this checkout and, with
    `baseline_ref`, of a worktree of that commit, each with `object_store` on the stack's object store and on the
    local disk; printed as a table.

    Args:
        rides: new rides before each run (`--rides`).
        repeat: measured runs per checkout (`--runs`).
        json_path: where to write every figure as JSON (`--json`); None for none.
        baseline_ref: a git ref to measure beside this checkout (`--baseline-ref`); None for none.
        stack_dir: the embedded stack to measure on (`--stack-dir`); None for a private one.
        object_store: measure each checkout on the stack's object store too (`--object-store`).

    Returns:
        Each checkout's runs, by step.
    """
    if rides < 1 or repeat < 1:
        raise BenchError("--rides takes a positive size, and --runs at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        work = Path(tmp)
        with (
            _checkouts(work, baseline_ref) as trees,
            bench_stack(work, stack_dir, object_store=object_store) as stack,
        ):
            from streaming_pipeline.lakehouse.registry_client import RegistryClient
            from streaming_pipeline.resources import KafkaResource

            assert stack.spark_pid and stack.dagster_home
            checkouts = on_each_lakehouse(trees) if object_store else trees
            kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
            registry = RegistryClient(stack.schema_registry_url)
            homes = {c.label: _dagster_home(work / f"home-{n}", stack.dagster_home) for n, c in enumerate(checkouts)}
            store_prefix = f"{stack.lakehouse_dir}/{work.name}" if object_store else ""
            lakes = {
                c.label: f"{store_prefix}/lakehouse-{n}" if c.on_object_store else str(work / f"lakehouse-{n}")
                for n, c in enumerate(checkouts)
            }
            result = RunCostResult(rides, repeat, machine_description(), checkouts)
            for round_number in range(repeat + 1):  # round 0 creates every table and checkpoint: not counted
                _send_round(kafka, registry, rides, round_number)
                order = checkouts if round_number % 2 == 0 else list(reversed(checkouts))
                for checkout in order:
                    what = "the warm-up run" if round_number == 0 else f"run {round_number} of {repeat}"
                    with bench_stage(f"{checkout.label}: {what}"):
                        env = {
                            **stack.env(),
                            "LAKEHOUSE_DIR": lakes[checkout.label],
                            "DAGSTER_HOME": str(homes[checkout.label]),
                        }
                        cost = _measured_run(Path(checkout.root), env, stack.spark_pid, work / "run.log")
                    if round_number:
                        checkout.runs.append(cost)
                        say(f"{checkout.label}: {what}: {cost.wall_seconds:.1f} s, {cost.engine_cpu_seconds:.1f} s CPU")
            if store_prefix:
                _delete_from_store(store_prefix, stack.object_store_env)
    _print_run_costs(result)
    if json_path is not None:
        json_path.write_text(_json(result))
    return result


@contextmanager
def _checkouts(work: Path, baseline_ref: str | None) -> Iterator[list[CheckoutCosts]]:
    """This checkout, and with `baseline_ref` a git worktree of that commit (removed afterwards)."""
    checkouts = [CheckoutCosts("this checkout", str(PROJECT_ROOT))]
    if baseline_ref is None:
        yield checkouts
        return
    tree = work / "baseline"
    added = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "worktree", "add", "--detach", str(tree), baseline_ref],
        capture_output=True,
        text=True,
    )
    if added.returncode != 0:
        raise BenchError(f"--baseline-ref {baseline_ref}: git worktree add failed: {added.stderr.strip()}")
    try:
        yield [*checkouts, CheckoutCosts(f"baseline {baseline_ref}", str(tree))]
    finally:
        subprocess.run(["git", "-C", str(PROJECT_ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def on_each_lakehouse(checkouts: list[CheckoutCosts]) -> list[CheckoutCosts]:
    """Each checkout measured with its lakehouse on the object store, then on the local disk (the reference)."""
    return [
        CheckoutCosts(f"{checkout.label}{where}", checkout.root, on_object_store=on_store)
        for checkout in checkouts
        for where, on_store in ((", object store", True), (", local disk", False))
    ]


def _delete_from_store(prefix: str, store_env: dict[str, str]) -> None:
    """The bench's lakehouses on the store, as the temporary directory takes the local ones with it."""
    from streaming_pipeline.lakehouse.engine.object_store import bucket_and_key, s3_filesystem_at

    fs = s3_filesystem_at(
        store_env.get("AWS_ENDPOINT_URL"),
        store_env.get("AWS_REGION"),
        store_env.get("AWS_ACCESS_KEY_ID"),
        store_env.get("AWS_SECRET_ACCESS_KEY"),
    )
    bucket, key = bucket_and_key(prefix)
    fs.rm(f"{bucket}/{key}", recursive=True)


def _dagster_home(home: Path, stack_home: Path) -> Path:
    home.mkdir(parents=True)
    shutil.copyfile(stack_home / "dagster.yaml", home / "dagster.yaml")
    return home


def _send_round(kafka: Any, registry: Any, rides: int, round_number: int) -> None:
    """`rides` new synthetic rides whose pickup times follow the previous round's, and a tenth as many pickups; the
    taxi zones first, in round 0 (the warm-up run loads them)."""
    if round_number == 0 and produce_zone_lookup(kafka, registry).failed:
        raise BenchError("producing the taxi zones failed")
    options = SyntheticOptions(seed=round_number, start=DEFAULT_START + timedelta(seconds=2.0 * rides * round_number))
    for topic, records in (
        (RIDES_TOPIC, list(synthetic_rides(rides, options))),
        (PICKUPS_TOPIC, list(synthetic_pickups(max(1, rides // 10), options))),
    ):
        sent = produce(kafka, registry, topic, rows_from_records(records), show_progress=False)
        if sent.sent != len(records):
            raise BenchError(f"{len(records) - sent.sent} of {len(records)} records could not be produced to {topic}")


def _measured_run(root: Path, env: dict[str, str], engine_pid: int, log_file: Path) -> RunCost:
    """One `dagster asset materialize --select '*'` of the checkout at `root`, measured."""
    command = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "streaming_pipeline.definitions"]
    environment = {**os.environ, **env, "PYTHONPATH": str(root)}  # the checkout's code before the installed one
    with EngineCpu(engine_pid) as cpu, log_file.open("w") as log:
        started = time.time()
        finished = subprocess.run([*command, "--select", "*"], cwd=root, env=environment, stdout=log, stderr=log)
        ended = time.time()
    if finished.returncode != 0:
        tail = log_file.read_text(errors="replace")[-3000:]
        raise BenchError(f"the run of {root} failed (exit {finished.returncode}); the end of its output:\n{tail}")
    steps = _step_costs(Path(env["DAGSTER_HOME"]), cpu)
    return RunCost(round(ended - started, 3), round(cpu.used(), 3), steps)


def _step_costs(home: Path, cpu: EngineCpu) -> dict[str, StepCost]:
    """Per step of the instance's newest run: wall and engine CPU from its start and end events, and the parts
    its materializations report; the check steps (which evaluate checks and materialize nothing; a table's step
    evaluates its expectations too) summed as CHECKS."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        events = instance.all_logs(instance.get_runs(limit=1)[0].run_id)
    evaluated = [e for e in events if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"]
    materialized = {e.step_key for e in events if e.dagster_event and e.dagster_event.is_step_materialization}
    checks = {e.step_key for e in evaluated} - materialized
    starts: dict[str, float] = {}
    steps: dict[str, StepCost] = {}
    for event in events:
        step, kind = event.step_key, event.dagster_event.event_type_value if event.dagster_event else None
        if step is None or kind is None:
            continue
        name = CHECKS if step in checks else step
        if kind == "STEP_START":
            starts[step] = event.timestamp
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE") and step in starts:
            cost = steps.setdefault(name, StepCost(0.0, 0.0))
            cost.wall_seconds += event.timestamp - starts[step]
            cost.engine_cpu_seconds += cpu.at(event.timestamp) - cpu.at(starts[step])
        elif kind == "ASSET_MATERIALIZATION" and event.asset_materialization is not None:
            cost = steps.setdefault(name, StepCost(0.0, 0.0))
            metadata = event.asset_materialization.metadata
            for key, part in STEP_PARTS.items():
                if key in metadata and part not in cost.parts:  # a step writing two tables reports its query once
                    cost.parts[part] = float(metadata[key].value)  # type: ignore[arg-type]
    return {
        name: StepCost(round(c.wall_seconds, 3), round(c.engine_cpu_seconds, 3), c.parts) for name, c in steps.items()
    }


def _print_run_costs(result: RunCostResult) -> None:
    print(f"\nA whole run after {result.rides} new rides, every asset and check, medians of {result.repeat} run(s)")
    print(f"machine: {result.machine}")
    labels = [c.label for c in result.checkouts]
    width = max(30, *(len(label) + 2 for label in labels))
    print(f"{'':<34}" + "".join(f"{label:>{width}}" for label in labels))

    def row(name: str, values: list[str]) -> None:
        print(f"{name:<34}" + "".join(f"{v:>{width}}" for v in values))

    totals = [f"{c.median('wall_seconds'):.1f} / {c.median('engine_cpu_seconds'):.1f}" for c in result.checkouts]
    row("run: wall s / engine CPU s", totals)
    steps = sorted({s for c in result.checkouts for run in c.runs for s in run.steps}, key=lambda s: (s == CHECKS, s))
    for step in steps:
        row(
            f"  {step}",
            [
                f"{c.step_median(step, 'wall_seconds'):.2f} / {c.step_median(step, 'engine_cpu_seconds'):.2f}"
                for c in result.checkouts
            ],
        )
        for part in STEP_PARTS.values():
            values = [c.part_median(step, part) for c in result.checkouts]
            if any(v is not None for v in values):
                row(f"    {part} (wall s)", ["-" if v is None else f"{v:.2f}" for v in values])
    for measured, reference in ratio_pairs(result.checkouts):
        for figure, label in (("wall_seconds", "wall"), ("engine_cpu_seconds", "engine CPU")):
            ratio = measured.median(figure) / reference.median(figure)
            print(f"{label}: {measured.label} / {reference.label} = {ratio:.2f}")


def ratio_pairs(checkouts: list[CheckoutCosts]) -> list[tuple[CheckoutCosts, CheckoutCosts]]:
    """(measured, reference): each checkout on the object store against itself on the local disk, and this
    checkout against the baseline on the same lakehouse."""
    ours = checkouts[0].root
    pairs = [
        (store, disk)
        for store in checkouts
        for disk in checkouts
        if store.on_object_store and not disk.on_object_store and store.root == disk.root
    ]
    pairs += [
        (mine, base)
        for mine in checkouts
        for base in checkouts
        if mine.root == ours and base.root != ours and mine.on_object_store == base.on_object_store
    ]
    return pairs


def _json(result: RunCostResult) -> str:
    import json

    return json.dumps(asdict(result), indent=2)
