"""What more than one benchmark uses: its stack, its messages and tables, the machine, and the memory and CPU of
processes (from /proc)."""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import statistics
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from streaming_pipeline.devstack.engine_events import event_log_conf
from streaming_pipeline.devstack.errors import BenchError
from streaming_pipeline.lakehouse.engine.delta_log import commits
from streaming_pipeline.lakehouse.progress import Progress, waiting


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def bench_stage(what: str) -> AbstractContextManager[Progress]:
    """A stage that can take minutes: a running clock on a terminal, nothing in a log (the bench says the outcome)."""
    return waiting(f"[bench] {what}")


def machine_description() -> str:
    import os

    mem_gib = 0.0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_gib = int(line.split()[1]) / 1024 / 1024
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def engine_description(spark: Any) -> str:
    from streaming_pipeline.lakehouse.engine.jars import spark_versions

    return f"Spark {spark.version} Connect server, local[*]; Delta {spark_versions()[1]}"


def print_rows(rows: list[tuple[str, str]], notes: list[str]) -> None:
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    for note in notes:
        print(f"note: {note}")


def write_json(path: Path | None, figures: Any) -> None:
    if path is not None:
        path.write_text(json.dumps(asdict(figures), indent=2))
        say(f"wrote {path}")


#: Shorter names of Spark's `durationMs` phases in the printed breakdowns.
PHASE_LABELS = {"latestOffset": "offsets", "queryPlanning": "planning"}


@contextlib.contextmanager
def bench_stack(
    work: Path,
    stack_dir: Path | None,
    *,
    live_mode: str | None = None,
    event_log: Path | None = None,
    engine_conf: Mapping[str, str] | None = None,
    object_store: bool = False,
) -> Iterator[Any]:
    """The stack a bench measures on: a new one under `work`, stopped afterwards, or with `stack_dir`
    (`--stack-dir`) the embedded stack there, started if it is not running and left running, whose topics must hold
    no record yet (the bench counts every record it reads as its own). Either way the bench's runs go to a Dagster
    instance of its own under `work`, with the stack's dagster.yaml. `event_log`: a new stack's engine writes its
    Spark event log there (`engine_events`); `engine_conf`: Spark settings of a new stack's engine; `object_store`:
    the stack has its S3-compatible object store (`stack up --object-store`)."""
    from dataclasses import replace

    from streaming_pipeline.devstack.embedded.stack import EmbeddedStack, running_stack
    from streaming_pipeline.devstack.project import project_sources
    from streaming_pipeline.resources import KafkaResource

    with contextlib.ExitStack() as stop:
        if stack_dir is None:
            conf = {**(event_log_conf(event_log) if event_log is not None else {}), **(engine_conf or {})}
            stack = stop.enter_context(
                running_stack(work / "stack", live_mode=live_mode, engine_conf=conf, object_store=object_store)
            )
        else:
            stack = EmbeddedStack(stack_dir, object_store=object_store).up(progress=say)
            kafka = KafkaResource(bootstrap_servers=stack.bootstrap_servers)
            holding = {s.topic: n for s in project_sources() if (n := sum(kafka.end_offsets(s.topic).values()))}
            if holding:
                raise BenchError(
                    f"the stack in {stack_dir} already holds records in {holding} (topic: records); the bench needs "
                    "topics with no record: delete them, or leave out --stack-dir for a private stack"
                )
        home = work / "dagster_home"
        home.mkdir(parents=True, exist_ok=True)
        assert stack.dagster_home is not None  # every embedded stack has one
        shutil.copyfile(stack.dagster_home / "dagster.yaml", home / "dagster.yaml")
        yield replace(stack, dagster_home=home)


def bronze_handler_steps(raw_rides: str, after: int | None) -> tuple[dict[str, float], int]:
    """The median milliseconds of each step of raw_rides' handler before its append (`handler_ms` in its commits'
    markers) over its commits after version `after`, and how many commits that is ({} and 0 for the floor's)."""
    steps: dict[str, list[float]] = {}
    batches = 0
    for commit in commits(raw_rides, after=after) or []:
        laps = (commit.user_metadata or {}).get("handler_ms")
        if isinstance(laps, dict):
            batches += 1
            for step, ms in laps.items():
                steps.setdefault(step, []).append(float(ms))
    return {step: round(statistics.median(values), 1) for step, values in steps.items()}, batches


def process_memory_bytes(pid: int | None, field: str) -> int:
    """A memory field of a process from /proc/PID/status (VmRSS: resident now, VmHWM: peak); 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text() if pid else ""
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def process_tree(pid: int | None) -> list[int]:
    """`pid` and its descendants (from /proc)."""
    if not pid:
        return []
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def cpu_seconds(pids: list[int], *, reaped_children: bool = False) -> float:
    """User + system CPU seconds of the processes (those gone count 0); with `reaped_children`, also those of the
    children each has waited for (a process that ended and was reaped leaves its time with its parent)."""
    import os

    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11 : 15 if reaped_children else 13])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")
