"""Progress output that suits where it goes (streaming_pipeline.lakehouse.progress): a bar on a terminal (plain lines
every few seconds there without one), only the final line into a pipe or a log, nothing when disabled; and `produce`
into a pipe writes one line, not one per record.

The plain-line tests drive a fake clock, so their line counts are exact and nothing sleeps. The steps of the fake
clock are multiples of 1/64 s, which floats add exactly."""

from __future__ import annotations

import io
import subprocess
import sys
import time
import types
from typing import Any

import pytest

from streaming_pipeline.lakehouse import progress as progress_module
from streaming_pipeline.lakehouse.progress import Progress, waiting

STEP = 1 / 64  # seconds of the fake clock per update
SIMULATED_SECONDS = 20
UPDATES = int(SIMULATED_SECONDS / STEP)  # 1,280


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TerminalStringIO(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def _run_updates(reporter: Progress, clock: FakeClock, updates: int = UPDATES) -> None:
    for _ in range(updates):
        clock.now += STEP
        reporter.update(1)


def test_a_pipe_gets_only_the_final_line() -> None:
    stream, clock = io.StringIO(), FakeClock()
    with Progress(UPDATES, "producing rides", "rec", stream=stream, interval_seconds=2.0, clock=clock) as bar:
        _run_updates(bar, clock)
        bar.tick()
    assert stream.getvalue() == f"producing rides: 1,280/1,280 rec (100%) in {SIMULATED_SECONDS:.1f} s, 64 rec/s\n"


@pytest.mark.parametrize("interval", [2.0, 2.5, 3.0, 5.0, 7.0])
def test_plain_lines_on_a_terminal_come_once_per_interval_not_once_per_update(interval: float) -> None:
    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(
        UPDATES, "producing rides", "rec", stream=stream, bar=False, interval_seconds=interval, clock=clock
    ) as bar:
        _run_updates(bar, clock)
    lines = _lines(stream.getvalue())
    periodic = int(SIMULATED_SECONDS // interval)  # one line each time `interval` seconds have passed
    assert len(lines) == periodic + 1  # and the final line
    assert "\r" not in stream.getvalue()
    assert lines[-1] == f"producing rides: 1,280/1,280 rec (100%) in {SIMULATED_SECONDS:.1f} s, 64 rec/s"


def test_plain_lines_say_count_total_share_and_rate() -> None:
    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(3000, "producing rides", "rec", stream=stream, bar=False, interval_seconds=5.0, clock=clock) as bar:
        _run_updates(bar, clock)
    assert _lines(stream.getvalue()) == [
        "producing rides: 320/3,000 rec (10%), 64 rec/s",
        "producing rides: 640/3,000 rec (21%), 64 rec/s",
        "producing rides: 960/3,000 rec (32%), 64 rec/s",
        "producing rides: 1,280/3,000 rec (42%), 64 rec/s",
        "producing rides: 1,280/3,000 rec (42%) in 20.0 s, 64 rec/s",
    ]


def test_without_a_total_lines_count_and_a_status_follows_the_count() -> None:
    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(None, "  kafka", "modules", stream=stream, bar=False, rate=False, clock=clock) as bar:
        bar.set_status("3 files downloaded")
        _run_updates(bar, clock, 320)
    assert _lines(stream.getvalue()) == [
        "  kafka: 320 modules, 3 files downloaded, 5 s",
        "  kafka: 320 modules in 5.0 s, 3 files downloaded",
    ]


def test_a_terminal_gets_a_tqdm_bar() -> None:
    import tqdm  # noqa: F401  (the stack extra's; a test without it fails naming it)

    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(UPDATES, "producing rides", "rec", stream=stream, clock=clock) as bar:
        assert bar.draws_bar
        _run_updates(bar, clock)
    output = stream.getvalue()
    assert "\r" in output  # tqdm redraws its line
    assert "producing rides" in output and "1280/1280" in output


def test_a_terminal_without_tqdm_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # importing tqdm now raises ImportError
    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(UPDATES, "producing rides", "rec", stream=stream, clock=clock) as bar:
        assert not bar.draws_bar
        _run_updates(bar, clock)
    assert len(_lines(stream.getvalue())) == SIMULATED_SECONDS // 5 + 1
    assert "\r" not in stream.getvalue()


def test_importing_the_module_does_not_import_tqdm_or_dagster() -> None:
    code = (
        "import sys, streaming_pipeline.lakehouse.progress; "
        "print(sorted(m for m in ('tqdm', 'dagster') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("stream_type", [io.StringIO, TerminalStringIO])
def test_disabled_writes_nothing(stream_type: type[io.StringIO]) -> None:
    stream, clock = stream_type(), FakeClock()
    said: list[str] = []
    with Progress(UPDATES, "producing rides", "rec", stream=stream, enabled=False, clock=clock) as bar:
        _run_updates(bar, clock)
        bar.tick()
    with Progress(None, "waiting", None, stream=stream, say=said.append, enabled=False, heartbeat=True) as bar:
        bar.tick()
    assert stream.getvalue() == ""
    assert said == []


def test_lines_go_to_say_and_bar_false_keeps_them_plain_on_a_terminal() -> None:
    stream, clock = TerminalStringIO(), FakeClock()
    said: list[str] = []
    with Progress(UPDATES, "resolving", "modules", stream=stream, say=said.append, bar=False, clock=clock) as bar:
        _run_updates(bar, clock)
    assert stream.getvalue() == ""
    assert len(said) == SIMULATED_SECONDS // 5 + 1


def test_a_wait_on_a_terminal_without_a_bar_ticks_a_line_per_interval_and_writes_no_final_line() -> None:
    stream, clock = TerminalStringIO(), FakeClock()
    with Progress(None, "[bench] plain Spark", None, stream=stream, bar=False, leave=False, clock=clock) as wait:
        for _ in range(SIMULATED_SECONDS * 4):
            clock.now += 0.25
            wait.tick()
    assert _lines(stream.getvalue()) == [f"[bench] plain Spark: still running after {s} s" for s in (5, 10, 15, 20)]


def test_a_wait_shorter_than_the_interval_writes_nothing() -> None:
    stream = io.StringIO()
    with waiting("[bench] warm-up", stream=stream, interval_seconds=5.0):
        pass
    assert stream.getvalue() == ""


def test_a_wait_into_a_pipe_writes_nothing_however_long() -> None:
    stream, said = io.StringIO(), []
    with waiting("materializing", stream=stream, say=said.append, interval_seconds=0.05):
        time.sleep(0.3)
    assert stream.getvalue() == "" and said == []


def test_the_heartbeat_writes_lines_on_a_terminal_without_tqdm_while_the_caller_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # importing tqdm now raises ImportError
    said: list[str] = []
    with waiting("materializing", stream=TerminalStringIO(), say=said.append, interval_seconds=0.05):
        time.sleep(0.5)  # a blocking call that reports nothing itself
    assert 3 <= len(said) <= 11
    assert all(line.startswith("materializing: still running after ") for line in said)


def test_the_heartbeat_keeps_a_terminal_bar_running_and_erases_it() -> None:
    import tqdm  # noqa: F401  (the stack extra's; a test without it fails naming it)

    stream = TerminalStringIO()
    with waiting("materializing", stream=stream, interval_seconds=0.05):
        time.sleep(0.3)
    output = stream.getvalue()
    assert "materializing: running 00:00" in output
    assert output.count("\r") >= 3  # redrawn while it ran, then erased (leave=False)
    assert "\n" not in output


# ----------------------------------------------------------------------------------------------- produce


class _FakeProducer:
    """librdkafka stand-in: every record is delivered at once; each costs `STEP` seconds of the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.records = 0

    def produce(self, topic: str, key: Any, value: Any, on_delivery: Any) -> None:
        self.records += 1
        self.clock.now += STEP
        on_delivery(None, None)

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


class _FakeKafka:
    timeout_seconds = 5.0

    def __init__(self, clock: FakeClock) -> None:
        self.fake_producer = _FakeProducer(clock)

    def ensure_topic(self, topic: str, partitions: int = 2, cleanup_policy: str | None = None) -> None:
        pass

    def producer(self, **_config: Any) -> _FakeProducer:
        return self.fake_producer


class _FakeRegistry:
    def register(self, subject: str, schema: str) -> int:
        return 1

    def serializer(self, schema: str) -> Any:
        return lambda _obj, _ctx: b"\x00\x00\x00\x00\x01"


def _produce_rides(monkeypatch: pytest.MonkeyPatch, rides: int, *, show_progress: bool = True) -> _FakeKafka:
    from streaming_pipeline.devstack.producer import produce, rows_from_records
    from streaming_pipeline.devstack.synthetic import SyntheticOptions, synthetic_rides
    from streaming_pipeline.lakehouse.tables import RIDES_TOPIC

    clock = FakeClock()
    # The producer's Progress reads the clock through the module's `time`: only progress output sees the fake.
    monkeypatch.setattr(progress_module, "time", types.SimpleNamespace(monotonic=clock))
    kafka = _FakeKafka(clock)
    records = synthetic_rides(rides, SyntheticOptions(seed=1))
    result = produce(
        kafka,  # type: ignore[arg-type]
        _FakeRegistry(),  # type: ignore[arg-type]
        RIDES_TOPIC,
        rows_from_records(records),
        total=rides,
        show_progress=show_progress,
    )
    assert result.sent == rides and result.failed == 0
    return kafka


def test_produce_into_a_pipe_writes_only_its_final_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce_rides(monkeypatch, UPDATES)  # 20 s of the fake clock; stderr is a capture, not a terminal
    assert _lines(capsys.readouterr().err) == ["producing rides: 1,280/1,280 rec (100%) in 20.0 s, 64 rec/s"]


def test_produce_without_progress_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _produce_rides(monkeypatch, UPDATES, show_progress=False)
    assert capsys.readouterr().err == ""
