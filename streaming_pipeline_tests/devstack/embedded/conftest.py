"""Fixtures of the embedded-stack tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streaming_pipeline.devstack.embedded.stack import EmbeddedStack


@pytest.fixture
def stacks() -> Iterator[list[EmbeddedStack]]:
    """Stacks a test appends here are always brought down."""
    created: list[EmbeddedStack] = []
    yield created
    for stack in created:
        stack.down(timeout=10)
