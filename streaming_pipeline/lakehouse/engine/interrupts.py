"""Calls to the engine are not interrupted midway: `interrupts_held()` holds SIGINT and SIGTERM while a block runs and
hands one that came to the handler in place once the block is done.

Dagster terminates a run with SIGINT (SIGTERM maps to it), and its handler raises an exception wherever the run is.
Raised inside a call to the Spark Connect server (pyspark's gRPC client creating or reading a call), it leaves the
client's channel half-used, and the next call, the one that stops the queries, can wait forever: a terminated
continuous run hung until Dagster gave up canceling it after 180 s, with its queries left running. Held, the
termination is raised between two calls, and the queries are stopped.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold HELD_SIGNALS while the block runs; then call the handler that was in place with the first one that came
    (Dagster's raises DagsterExecutionInterruptedError; Python's default raises KeyboardInterrupt), also when the
    block raised (the termination wins, the block's error is its context). Only the main thread can handle signals;
    elsewhere, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[signal.Signals] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum))

    handlers = {signum: signal.signal(signum, hold) for signum in HELD_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if received:
            _deliver(received[0], handlers[received[0]])


def _deliver(signum: signal.Signals, handler: object) -> None:
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)  # the default action, now that the default handler is back
