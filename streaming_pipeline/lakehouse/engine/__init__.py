"""The engine under every layer: Spark sessions and profiles, the jars a local driver needs (resolved with Ivy),
Java, availableNow stream runs, Delta table I/O and the Spark-free Delta log reader."""
