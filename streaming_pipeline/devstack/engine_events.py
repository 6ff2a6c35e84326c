"""Where a streaming query's time goes, from the engine's Spark event log (`spark.eventLog.enabled`): the benches
start their engine with it, and Spark writes every micro-batch's progress report there (the
`StreamingQueryListener.QueryProgressEvent` that its history server reads), whichever process started the query.

Per query over a window of time: its micro-batches, the rows they read, and the seconds Spark spent in each phase it
reports (`durationMs`: latestOffset, getBatch, queryPlanning, addBatch, walCommit, commitOffsets, and
triggerExecution, the whole micro-batch). Spark-free: the log is JSON lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

#: The event class Spark logs for each micro-batch's progress report.
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
#: The phases of `durationMs`, in the order a micro-batch runs them; `triggerExecution` is the whole batch.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def event_log_conf(directory: Path) -> dict[str, str]:
    """The Spark settings that make an engine write its event log into `directory` (created here), as plain JSON
    lines (Spark 4 compresses it with zstd by default)."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }


@dataclass
class QueryBreakdown:
    """What one streaming query's micro-batches did in a window: their number, rows read, and seconds per phase."""

    micro_batches: int = 0
    input_rows: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def add(self, progress: dict[str, object]) -> None:
        self.micro_batches += 1
        # The event log holds the report's fields (Jackson): the rows read are per source.
        sources = progress.get("sources") or []
        assert isinstance(sources, list)
        self.input_rows += sum(int(source.get("numInputRows") or 0) for source in sources)
        durations = progress.get("durationMs") or {}
        assert isinstance(durations, dict)
        for phase in PHASES:
            seconds = float(durations.get(phase) or 0) / 1000
            self.phase_seconds[phase] = round(self.phase_seconds.get(phase, 0.0) + seconds, 3)

    def seconds_per_batch(self, phase: str) -> float:
        return self.phase_seconds.get(phase, 0.0) / self.micro_batches if self.micro_batches else 0.0


def progress_reports(directory: Path) -> list[dict[str, object]]:
    """Every micro-batch progress report in the event logs of `directory` (also those still being written). Spark 4
    rolls an application's log over the files of a folder of its own (`eventlog_v2_<app id>/events_<n>_<app id>`)."""
    reports: list[dict[str, object]] = []
    for log in sorted(p for p in directory.rglob("*") if p.is_file()):
        with log.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if PROGRESS_EVENT not in line:
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # the last line of a log being written
                    continue
                if event.get("Event") == PROGRESS_EVENT and isinstance(event.get("progress"), dict):
                    reports.append(event["progress"])
    return reports


def query_breakdowns(reports: list[dict[str, object]], start: float, end: float) -> dict[str, QueryBreakdown]:
    """Per query name, its micro-batches that started between the epoch seconds `start` and `end`."""
    breakdowns: dict[str, QueryBreakdown] = {}
    for progress in reports:
        started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00")).timestamp()
        if start <= started <= end:
            breakdowns.setdefault(str(progress.get("name") or progress.get("id")), QueryBreakdown()).add(progress)
    return dict(sorted(breakdowns.items()))
