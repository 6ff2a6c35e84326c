"""Unit tests of `engine.streams`: what a stream run reports from Spark's progress."""

from __future__ import annotations

from streaming_pipeline.engine.streams import StreamRunReport


def test_observed_metrics_are_summed_over_batches_in_both_progress_shapes() -> None:
    """In-process progress JSON has {metric: value}; Spark Connect's has {values, schema}."""
    report = StreamRunReport("q")
    schema = {"type": "struct", "fields": [{"name": "unknown_pickup_zones"}, {"name": "unknown_dropoff_zones"}]}
    report.add({"numInputRows": 5, "observedMetrics": {"enrichment": {"values": [2, 0], "schema": schema}}})
    report.add(
        {"numInputRows": 7, "observedMetrics": {"enrichment": {"unknown_pickup_zones": 1, "unknown_dropoff_zones": 3}}}
    )
    assert report.observed_metrics("enrichment") == {"unknown_pickup_zones": 3, "unknown_dropoff_zones": 3}
    assert report.observed_metrics("other") == {}
    assert (report.input_rows, report.batches) == (12, 2)
