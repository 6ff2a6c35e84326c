"""Kafka offsets a bronze query has consumed, and the lag behind the topic: Spark-free, for sensors and checks.

Spark commits no offsets to Kafka; a Structured Streaming query keeps them in its checkpoint. It writes
`offsets/<batch>` before a micro-batch and `commits/<batch>` after it, so the newest batch with a commit
file tells what is durably in Delta.
"""

from __future__ import annotations

import json
from pathlib import Path


def checkpoint_kafka_offsets(checkpoint_dir: str) -> dict[str, dict[int, int]]:
    """{topic: {partition: next offset}} up to which a bronze query has committed; {} before its first commit.

    Local paths and file: URIs only.
    """
    root = Path(checkpoint_dir.removeprefix("file://").removeprefix("file:"))
    commits = root / "commits"
    if not commits.is_dir():
        return {}
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    for batch in done:
        offset_file = root / "offsets" / str(batch)
        if not offset_file.is_file():
            continue
        lines = offset_file.read_text().splitlines()
        for line in lines[2:]:
            offsets = json.loads(line)
            return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in offsets.items()}
    return {}


def consumer_lag(end_offsets: dict[int, int], consumed: dict[int, int]) -> dict[int, int]:
    """Records waiting per partition: end offset minus what the checkpoint says was processed."""
    return {partition: max(0, end - consumed.get(partition, 0)) for partition, end in sorted(end_offsets.items())}
