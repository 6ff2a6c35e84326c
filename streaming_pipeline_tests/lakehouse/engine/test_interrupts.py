"""engine.interrupts: a termination (SIGINT, SIGTERM) that comes while the block talks to the engine is raised once
the block is done, by the handler that was in place; the handlers are back after the block."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from streaming_pipeline.lakehouse.engine.interrupts import interrupts_held


class Interrupted(Exception):
    pass


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


@pytest.fixture
def raising_handlers() -> Iterator[None]:
    """Stand-ins for Dagster's handlers, which raise DagsterExecutionInterruptedError on SIGINT and SIGTERM."""
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_termination_during_the_block_is_raised_once_the_block_is_done(
    raising_handlers: None, signum: signal.Signals
) -> None:
    done: list[str] = []
    with pytest.raises(Interrupted, match=signum.name):
        with interrupts_held():
            os.kill(os.getpid(), signum)
            time.sleep(0.2)  # the signal is delivered here, and held
            done.append("the calls")
    assert done == ["the calls"]
    assert signal.getsignal(signal.SIGINT) is _raise_interrupted
    assert signal.getsignal(signal.SIGTERM) is _raise_interrupted


def test_without_a_termination_nothing_is_raised_and_the_handlers_are_back(raising_handlers: None) -> None:
    with interrupts_held():
        assert signal.getsignal(signal.SIGINT) is not _raise_interrupted
    assert signal.getsignal(signal.SIGINT) is _raise_interrupted


def test_a_termination_wins_over_the_blocks_own_error(raising_handlers: None) -> None:
    with pytest.raises(Interrupted) as caught:
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
            raise ValueError("the query failed")
    assert isinstance(caught.value.__context__, ValueError)
