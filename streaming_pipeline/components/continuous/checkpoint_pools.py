"""The continuous run's claim on the concurrency pool of every checkpoint it streams, and the lending of one to a
step of another run that waits for it. No Dagster definitions here: the continuous run's op uses these."""

import time

import dagster as dg

from streaming_pipeline.lakehouse.engine.continuous import ContinuousQueries


class CheckpointPools:
    """The concurrency pool of every checkpoint the run streams, one claim per pool under a step key of its own
    (`continuous_streams:<query>`), so that each can be freed alone.

    A step of another run that waits for one of them (a manual run, a table's maintenance) gets it: the run stops
    that query, frees the pool and queues for it again behind that step, and starts the query once the pool is
    its own again. With run-granular pools (an instance not written by `stack up`), nothing is claimed.

    Args:
        context: The continuous run's op context: its instance's event log storage holds the pools.
        pools: Each query's checkpoint pool, by query name.
    """

    def __init__(self, context: dg.OpExecutionContext, pools: dict[str, str]) -> None:
        self._storage = context.instance.event_log_storage
        self._run_id = context.run_id
        self._log = context.log
        config = self._storage.get_pool_config()
        granularity = config.pool_granularity.value if config.pool_granularity is not None else None
        if not (self._storage.supports_global_concurrency_limits and granularity == "op"):
            context.log.warning(
                "the instance's concurrency pools are not op-granular (dagster.yaml `concurrency: pools: granularity:"
                " op`, which `streaming-pipeline stack up` writes): this run holds no pool, and a triggered run could "
                "start a query on a checkpoint it streams"
            )
            pools = {}
        for pool in set(pools.values()):
            limits = {limit.name for limit in self._storage.get_pool_limits()}
            if pool not in limits and config.default_pool_limit is not None:
                self._storage.initialize_concurrency_limit_to_default(pool)
        limited = {limit.name for limit in self._storage.get_pool_limits()} if pools else set()
        # A pool without a limit excludes nothing: there is nothing to claim.
        self._pools = {query: pool for query, pool in pools.items() if pool in limited}

    def _key(self, query: str) -> str:
        return f"continuous_streams:{query}"

    def claim(self, query: str) -> bool:
        """Claim (or queue for) the pool of `query`'s checkpoint.

        Args:
            query: The name of one of the run's queries.

        Returns:
            True once the pool is this run's (always for a query whose pool is not claimed).
        """
        if query not in self._pools:
            return True
        return self._storage.claim_concurrency_slot(self._pools[query], self._run_id, self._key(query)).is_claimed

    def claim_all(self, poll_seconds: float) -> None:
        """Claim every pool, in a fixed order (no two runs wait for each other's), waiting while a step holds one.

        Args:
            poll_seconds: How long to wait before asking again for a pool a step of another run holds.
        """
        for query in sorted(self._pools, key=self._pools.__getitem__):
            said = False
            while not self.claim(query):
                if not said:
                    self._log.info(f"waiting for pool {self._pools[query]}: a step of another run works on it")
                    said = True
                time.sleep(poll_seconds)

    def wanted(self) -> dict[str, str]:
        """The queries whose pool a step of another run waits for.

        Returns:
            Query name -> that step, as `step (run id)`.
        """
        wanted = {}
        for query, pool in self._pools.items():
            for step in self._storage.get_concurrency_info(pool).pending_steps:
                if step.run_id != self._run_id:
                    wanted[query] = f"{step.step_key} (run {step.run_id})"
                    break
        return wanted

    def lend(self, query: str) -> None:
        """Free the pool of `query` for the step waiting for it, and queue for it again behind that step.

        Args:
            query: The name of one of the run's queries, stopped by the caller.
        """
        self._storage.free_concurrency_slot_for_step(self._run_id, self._key(query))
        self.claim(query)

    def free_all(self) -> None:
        """Free every pool this run claimed or queues for (when the run ends)."""
        for query in self._pools:
            self._storage.free_concurrency_slot_for_step(self._run_id, self._key(query))


def lend_and_take_back(
    context: dg.OpExecutionContext, runner: ContinuousQueries, pools: CheckpointPools, lent: set[str]
) -> None:
    """Stop and lend the checkpoints another run's step waits for; start again those that came back.

    Args:
        context: The continuous run's op context (its log).
        runner: The run's queries.
        pools: The run's checkpoint pools.
        lent: The queries whose pool is lent; updated in place.
    """
    for query, step in pools.wanted().items():
        if query not in lent:
            runner.hold(query)
            pools.lend(query)
            lent.add(query)
            context.log.info(f"{query}: stopped, its checkpoint lent to step {step}")
    for query in sorted(lent):
        if pools.claim(query):
            lent.discard(query)
            runner.resume(query)
            context.log.info(f"{query}: its checkpoint is back, streaming again")
