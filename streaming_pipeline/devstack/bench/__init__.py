"""`streaming-pipeline bench`: the benchmarks, one module each (the `bench` subcommand of the same name; `run_cost`
for `bench run`), and what more than one of them uses (`common`).

Each starts a private embedded stack (Kafka, registry, the Spark Connect engine), or takes the running one in
`--stack-dir`, and measures on it in one run, so every ratio compares figures taken on the same machine at the same
time.
"""
