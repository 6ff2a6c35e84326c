"""The engine under every layer: the Spark resource and session, availableNow stream runs, Delta table I/O and the
Spark-free Delta log reader."""
