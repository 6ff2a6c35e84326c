"""`replay` refuses to start while a run works on the tables it would empty, before it touches Kafka, Spark or the
lakehouse: no server is needed to see it refuse."""

from __future__ import annotations

import dagster as dg
import pytest

from streaming_pipeline.definitions import pipeline_definitions
from streaming_pipeline.devstack.errors import ReplayError
from streaming_pipeline.devstack.project import project_sources
from streaming_pipeline.devstack.replay import ReplayStart, replay
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline.resources.from_settings import build_resources


def _defs(tmp_path) -> dg.Definitions:
    settings = PipelineSettings.from_env({"LAKEHOUSE_DIR": str(tmp_path / "lakehouse")})
    return dg.Definitions.merge(pipeline_definitions(), dg.Definitions(resources=build_resources(settings)))


def _replay_raw_rides(tmp_path, instance: dg.DagsterInstance) -> None:
    replay(
        "raw_rides",
        ReplayStart(),
        defs=_defs(tmp_path),
        sources=project_sources(),
        instance=instance,
        progress=lambda _: None,
    )


def _instance_with(job_name: str, status: dg.DagsterRunStatus) -> tuple[dg.DagsterInstance, str]:
    instance = dg.DagsterInstance.ephemeral()
    run = dg.DagsterRun(job_name=job_name, status=status)
    instance.add_run(run)
    return instance, run.run_id


def test_replay_refuses_while_the_continuous_run_streams_and_says_how_to_stop_it(tmp_path):
    instance, run_id = _instance_with("continuous_streams_job", dg.DagsterRunStatus.STARTED)
    with pytest.raises(ReplayError) as raised:
        _replay_raw_rides(tmp_path, instance)
    assert run_id in str(raised.value)
    assert "stop continuous_streams_sensor" in str(raised.value)
    assert not (tmp_path / "lakehouse").exists()  # nothing moved or emptied


@pytest.mark.parametrize("job_name", ["raw_rides_downstream_job", "raw_rides_to_gold_job"])  # its name until 0.9.0
def test_replay_refuses_while_the_sources_live_job_runs(tmp_path, job_name):
    instance, run_id = _instance_with(job_name, dg.DagsterRunStatus.STARTING)
    with pytest.raises(ReplayError, match=run_id):
        _replay_raw_rides(tmp_path, instance)
