"""`python -m streaming_pipeline.resources.spark_prefetch`: resolve Spark's Maven packages once
(delta-spark, spark-sql-kafka, spark-avro) by starting and stopping a local session."""

from __future__ import annotations

import sys
import time


def main() -> int:
    from streaming_pipeline.resources.spark import SparkResource, maven_packages

    print(f"resolving {', '.join(maven_packages())} (first time: about a minute)", file=sys.stderr, flush=True)
    started = time.monotonic()
    session = SparkResource(conf={"spark.master": "local[1]"}).get_session()
    session.range(1).count()
    session.stop()
    print(f"Spark packages ready ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
