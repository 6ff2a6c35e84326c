"""Expectations in Dagster: how a component declares them (`ExpectationAttributes`, the same for a source and a
streaming table), and what they found as Dagster shows it: an asset check result per rule (the rows checked, the
violations, a few violating rows' values; a warning for `warn` and `drop`, an error for `fail`), and the counts in
the table's materialization. A triggered run yields them with its materialization; the continuous run logs them
with each report of the table."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from streaming_pipeline.lakehouse.expectations import Expectation, ExpectationCounts
from streaming_pipeline.lakehouse.sources import SourceTopic


class ExpectationAttributes(dg.Model):
    """A rule on the rows, as a component's YAML declares it (`expectations:`)."""

    name: str = Field(description="The rule's name: its asset check's name, and what a quarantined row lists.")
    expect: str = Field(
        description="A Spark SQL boolean expression over the table's row: the row keeps the rule when it is true "
        "(false and NULL break it).",
        examples=["total >= 0"],
    )
    on_violation: Literal["warn", "drop", "fail"] = Field(
        default="warn",
        description="`warn`: the row is written and counted; `drop`: it goes to the quarantine table instead; "
        "`fail`: the micro-batch fails before anything of it is written.",
    )

    def rule(self) -> Expectation:
        return Expectation(self.name, self.expect, self.on_violation)


_CONSEQUENCE = {
    "warn": "are written and counted",
    "drop": "are set aside in the quarantine table",
    "fail": "fail the micro-batch before anything of it is written",
}


def check_specs(asset: str, rules: Sequence[Expectation]) -> list[dg.AssetCheckSpec]:
    """An asset check per rule on `asset`, named as the rule."""
    return [
        dg.AssetCheckSpec(
            rule.name,
            asset=asset,
            description=f"{rule.on_violation}: rows where `{rule.constraint}` is not true "
            f"{_CONSEQUENCE[rule.on_violation]}.",
        )
        for rule in rules
    ]


def source_check_keys(source: SourceTopic) -> list[dg.AssetCheckKey]:
    """The checks of a source's expectations, which its bronze runs evaluate: a job that runs it selects them."""
    return [spec.key for spec in check_specs(source.bronze_table, source.expectations)]


def expectation_metadata(counts: ExpectationCounts, rules: Sequence[Expectation]) -> dict[str, Any]:
    """The materialization's metadata of what the rules found: the rows checked, each rule's violations, and the
    rows set aside."""
    if not rules:
        return {}
    metadata: dict[str, Any] = {"rows_checked": dg.MetadataValue.int(counts.rows)}
    for rule in rules:
        metadata[f"violations_{rule.name}"] = dg.MetadataValue.int(counts.violations.get(rule.name, 0))
    if any(rule.on_violation == "drop" for rule in rules):
        metadata["rows_quarantined"] = dg.MetadataValue.int(counts.dropped)
    return metadata


def expectation_checks(
    asset: str, counts: ExpectationCounts, rules: Sequence[Expectation]
) -> Iterator[dg.AssetCheckResult]:
    """A check result per rule for the micro-batches `counts` sums."""
    for rule in rules:
        yield dg.AssetCheckResult(asset_key=asset, check_name=rule.name, **check_result_args(counts, rule))


def check_evaluations(
    asset: str, counts: ExpectationCounts, rules: Sequence[Expectation]
) -> list[dg.AssetCheckEvaluation]:
    """The same results as events that a run logs (the continuous run's report of the table)."""
    key = dg.AssetKey(asset)
    return [
        dg.AssetCheckEvaluation(asset_key=key, check_name=rule.name, **check_result_args(counts, rule))
        for rule in rules
    ]


def check_result_args(counts: ExpectationCounts, rule: Expectation) -> dict[str, Any]:
    violations = counts.violations.get(rule.name, 0)
    sample = counts.samples.get(rule.name, ())
    metadata: dict[str, Any] = {
        "rows_checked": dg.MetadataValue.int(counts.rows),
        "violations": dg.MetadataValue.int(violations),
        "on_violation": dg.MetadataValue.text(rule.on_violation),
        "constraint": dg.MetadataValue.text(rule.constraint),
    }
    if sample:
        metadata["violating_values"] = dg.MetadataValue.json(list(sample))
    return {
        "passed": violations == 0,
        "severity": dg.AssetCheckSeverity.ERROR if rule.on_violation == "fail" else dg.AssetCheckSeverity.WARN,
        "metadata": metadata,
        "description": f"{violations} of {counts.rows} row(s) broke `{rule.constraint}`"
        if violations
        else f"none of {counts.rows} row(s) broke `{rule.constraint}`",
    }
