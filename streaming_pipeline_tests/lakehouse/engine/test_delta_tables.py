"""`create_if_missing`: steps of concurrent runs that each make sure a table exists (every source's runs report the
dead-letter table) create it once between them, and the ones that lose the race for its first commit go on."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException

from streaming_pipeline.lakehouse.engine import delta_tables
from streaming_pipeline.lakehouse.engine.delta_log import latest_version
from streaming_pipeline.lakehouse.engine.delta_tables import create_if_missing

pytestmark = pytest.mark.integration

DDL = "id BIGINT, reason STRING"
WRITERS = 3


def test_writers_that_all_found_no_table_create_it_together_and_none_fails(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each writer finds no table, then all write its first commit at once (a barrier after the look): Delta
    lets one commit first and fails the others with DELTA_PROTOCOL_CHANGED, which they take as the table made."""
    path = str(tmp_path / "dead_letter_records")
    looked = threading.Barrier(WRITERS)
    first_look: set[int] = set()
    real_exists = delta_tables.table_exists

    def exists(where: str) -> bool:
        if threading.get_ident() not in first_look:  # the look before the write: none, then all write together
            first_look.add(threading.get_ident())
            looked.wait(timeout=60)
            return False
        return real_exists(where)

    monkeypatch.setattr(delta_tables, "table_exists", exists)
    errors: list[BaseException] = []
    commits_before = []

    def create() -> None:
        try:
            commits_before.append(latest_version(path))
            create_if_missing(spark, path, DDL)
        except BaseException as exc:  # noqa: BLE001 - every error is the test's finding
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert commits_before == [None] * WRITERS  # none of them found a table
    table = spark.read.format("delta").load(path)
    schema = [(f.name, f.dataType.simpleString()) for f in table.schema.fields]
    assert schema == [("id", "bigint"), ("reason", "string")]
    assert table.count() == 0
    assert latest_version(path) is not None


class _Writes:
    """A session whose write of an empty frame runs `save` (the chain createDataFrame().write.format().mode())."""

    def __init__(self, save: Any) -> None:
        self.save = save

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self

    @property
    def write(self) -> _Writes:
        return self


def test_a_failed_creation_is_raised_unless_a_table_is_there_after_it(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost, failed = str(tmp_path / "lost"), str(tmp_path / "failed")

    def lose_the_race(path: str) -> None:  # another writer's table appears, and this commit fails
        spark.createDataFrame([], DDL).write.format("delta").save(path)
        raise PySparkException("[DELTA_PROTOCOL_CHANGED] concurrent update")

    create_if_missing(_Writes(lose_the_race), lost, DDL)  # type: ignore[arg-type]
    assert latest_version(lost) == 0

    def fail(path: str) -> None:
        raise PySparkException("the store refused the write")

    with pytest.raises(PySparkException, match="the store refused the write"):
        create_if_missing(_Writes(fail), failed, DDL)  # type: ignore[arg-type]
    assert latest_version(failed) is None
