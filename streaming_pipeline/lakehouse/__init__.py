"""The pipeline library: Kafka sources to bronze, silver and gold Delta tables on Spark, and the engine they run on.
Plain Python and Spark, no Dagster: it runs in Dagster's runs and in the Spark Connect server's foreachBatch
workers alike."""
