"""Errors as a test sees them through Dagster, which wraps the error of the module or component that raised it."""

from __future__ import annotations


def error_chain(error: BaseException) -> list[BaseException]:
    """`error` and every error it was raised from (its cause, else its context), outermost first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain
