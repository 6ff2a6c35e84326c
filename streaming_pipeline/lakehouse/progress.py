"""Progress that suits where it goes: a bar on a terminal, nothing but the outcome into a pipe or a log.

`streaming-pipeline produce ... | tee log` and a CI log must not fill with progress. So:

* the stream is a terminal (``stream.isatty()``): a tqdm bar (tqdm comes with the ``stack`` extra; it is imported
  only here, when a bar is drawn), or, without tqdm or with ``bar=False``, one plain line such as
  ``producing rides: 1,234/3,000 rec (41%), 512 rec/s`` at most every `interval_seconds`;
* anything else: no progress at all, only a final line on close (what was done, in how long);
* disabled: nothing at all.

For a long wait with nothing to count (``unit=None``), ``heartbeat=True`` keeps the bar's clock running on a
terminal (or writes ``<desc>: still running after 15 s`` there every `interval_seconds` without a bar), and writes
nothing elsewhere. Lines go to `say` when given (a caller's own printer); whether they are written at all still
depends on `stream` being a terminal, so a caller whose printer writes elsewhere passes that stream too. The clock
is injectable (`clock`), so that tests need not sleep.

Part of the pipeline library: no Dagster here, and tqdm is an optional dependency.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

DEFAULT_INTERVAL_SECONDS = 5.0
#: How often a heartbeat redraws a terminal bar (its elapsed time), whatever the interval of the plain lines.
TTY_REFRESH_SECONDS = 0.5

Say = Callable[[str], None]


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


class Progress:
    """A count of `unit` towards `total` (None: unknown; `unit` None: a wait with nothing to count).

    `update(n)` adds to the count, `set_status(text)` shows a note after it, `tick()` lets a polling loop report
    without counting, `close()` ends it (also as a context manager). Plain lines go to `say` when given (a caller's
    own printer, e.g. one that prefixes its lines), else to `stream`; a bar is drawn on `stream` only when `bar` is
    true and `stream` is a terminal, and plain lines are written while it runs only when `stream` is a terminal (into
    a pipe or a log, only the final line). With `leave` false a terminal bar is erased on close and no final line is
    written (for a wait whose caller reports the outcome itself); `rate` false leaves the per-second rate out.
    """

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str | None = "it",
        *,
        stream: TextIO | None = None,
        say: Say | None = None,
        enabled: bool = True,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        bar: bool = True,
        leave: bool = True,
        rate: bool = True,
        heartbeat: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be positive, got {interval_seconds}")
        self.total = total
        self.desc = desc
        self.unit = unit
        self.count = 0
        self.status = ""
        self.enabled = enabled
        self.interval_seconds = interval_seconds
        self.leave = leave
        self.rate = rate
        self.stream: TextIO = stream if stream is not None else sys.stderr  # at call time: a test's capture counts
        self._say = say
        self._clock = clock if clock is not None else time.monotonic
        self._lock = threading.RLock()
        self._closed = not enabled
        self._started = self._last_line = self._clock()
        terminal = _is_terminal(self.stream)
        self._bar: Any = self._open_bar() if enabled and bar and terminal else None
        self._periodic_lines = terminal  # plain lines while it runs: on a terminal only
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled and heartbeat and terminal:
            self._thread = threading.Thread(target=self._beat, name=f"progress: {desc}", daemon=True)
            self._thread.start()

    @property
    def draws_bar(self) -> bool:
        return self._bar is not None

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.count += n
            if self._closed:
                return
            if self._bar is not None:
                self._bar.update(n)
            else:
                self._line_if_due()

    def set_status(self, text: str) -> None:
        """A short note shown after the count (on a terminal, tqdm's postfix); shown from the next report on."""
        with self._lock:
            self.status = text
            if self._bar is not None and not self._closed:
                self._bar.set_postfix_str(text, refresh=False)

    def tick(self) -> None:
        """Report without counting: redraw the bar, or write a line when one is due."""
        with self._lock:
            if self._closed:
                return
            if self._bar is not None:
                self._bar.refresh()
            else:
                self._line_if_due()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            elif self.leave:
                self._write(self._final_line(self._clock()))

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plain lines

    def _line_if_due(self) -> None:
        if not self._periodic_lines:
            return
        now = self._clock()
        if now - self._last_line >= self.interval_seconds:
            self._last_line = now
            self._write(self._line(now))

    def _write(self, line: str) -> None:
        if self._say is not None:
            self._say(line)
        else:
            print(line, file=self.stream, flush=True)

    def _counted(self) -> str:
        if self.total:
            return f"{self.count:,}/{self.total:,} {self.unit} ({100 * self.count // self.total}%)"
        return f"{self.count:,} {self.unit}"

    def _per_second(self, elapsed: float) -> str:
        return f"{self.count / elapsed if elapsed > 0 else 0.0:,.0f} {self.unit}/s"

    def _line(self, now: float) -> str:
        elapsed = now - self._started
        if self.unit is None:
            return self._joined([f"still running after {elapsed:.0f} s"])
        return self._joined([self._counted()], self._per_second(elapsed) if self.rate else f"{elapsed:.0f} s")

    def _final_line(self, now: float) -> str:
        elapsed = now - self._started
        if self.unit is None:
            return self._joined([f"done in {elapsed:.1f} s"])
        return self._joined([f"{self._counted()} in {elapsed:.1f} s"], self._per_second(elapsed) if self.rate else "")

    def _joined(self, parts: list[str], last: str = "") -> str:
        """`desc: part, ..., status, last`."""
        return f"{self.desc}: {', '.join([*parts, *filter(None, [self.status, last])])}"

    # ------------------------------------------------------------------ terminal

    def _open_bar(self) -> Any:
        try:
            # By name: tqdm is optional (the `stack` extra), and the code location's import contract forbids it.
            tqdm = importlib.import_module("tqdm").tqdm
        except ImportError:
            return None
        options: dict[str, Any] = {"total": self.total, "desc": self.desc, "file": self.stream, "leave": self.leave}
        if self.unit is None:
            options["bar_format"] = "{desc}: running {elapsed}{postfix}"
        else:
            options["unit"] = self.unit
            if not self.rate and not self.total:
                options["bar_format"] = "{desc}: {n_fmt} {unit} [{elapsed}{postfix}]"
        return tqdm(**options)

    def _beat(self) -> None:
        """The heartbeat thread: keeps a terminal bar's clock running; writes a plain line when one is due."""
        while True:
            if self._bar is not None:
                wait = min(self.interval_seconds, TTY_REFRESH_SECONDS)
            else:
                wait = max(self.interval_seconds - (self._clock() - self._last_line), 0.05)
            if self._stop.wait(wait):
                return
            self.tick()


def waiting(
    desc: str,
    *,
    stream: TextIO | None = None,
    say: Say | None = None,
    enabled: bool = True,
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
    clock: Callable[[], float] | None = None,
) -> Progress:
    """A long wait with nothing to count: a running clock on a terminal, nothing elsewhere, and no final line (the
    caller reports the outcome). A context manager."""
    return Progress(
        None,
        desc,
        None,
        stream=stream,
        say=say,
        enabled=enabled,
        interval_seconds=interval_seconds,
        leave=False,
        heartbeat=True,
        clock=clock,
    )
