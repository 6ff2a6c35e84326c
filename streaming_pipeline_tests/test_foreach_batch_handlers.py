"""The foreachBatch handlers load in a Python worker without Dagster.

Over Spark Connect, the server starts a Python worker for each streaming query and unpickles the handler there
(pyspark's `foreach_batch_worker`), which imports the handler's module. Importing Dagster there cost seconds
per query start (and made workers miss their connect-back deadline under load), so the handler modules must not
import it. This test pickles each handler with the serializer Spark uses and loads it in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from streaming_pipeline.lakehouse.bronze.batches import BronzeBatchWriter
from streaming_pipeline.lakehouse.gold.windows import WindowUpsert
from streaming_pipeline.lakehouse.streaming_tables import KeyedUpsert

HANDLERS = {
    "bronze": BronzeBatchWriter(
        registry_url="http://127.0.0.1:1",
        registry_auth=None,
        subject="rides-value",
        fallback_reader_schema="{}",
        table_path="/lake/raw_rides",
        dead_letter_path="/lake/dead_letter_records",
        asset_name="raw_rides",
        checkpoint_dir="/lake/_checkpoints/raw_rides",
    ),
    "windows": WindowUpsert("/lake/ride_window_aggregates", 1_700_000_000_000_000),
    "streaming_table_upsert": KeyedUpsert("/lake/latest_orders", ("order_id",), "version"),
}

_LOAD = """
import sys
from pyspark.serializers import CPickleSerializer
handler = CPickleSerializer().loads(sys.stdin.buffer.read())
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("dagster", "dagster_pipes", "dagster_shared"))
print(type(handler).__module__ + "." + type(handler).__name__, repr(handler), loaded, sep="\\n")
"""


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_a_handler_unpickles_in_a_fresh_worker_without_dagster(name: str) -> None:
    from pyspark.serializers import CPickleSerializer

    handler = HANDLERS[name]
    payload = CPickleSerializer().dumps(handler)
    done = subprocess.run([sys.executable, "-c", _LOAD], input=payload, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    kind, text, loaded = done.stdout.decode().splitlines()
    assert kind == f"{type(handler).__module__}.{type(handler).__name__}"
    assert text == repr(handler)  # the same plain data arrived
    assert loaded == "[]"
