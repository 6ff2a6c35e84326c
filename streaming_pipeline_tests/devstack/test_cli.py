"""The command line without the development stack installed: a clear error, not a traceback from a server."""

from __future__ import annotations

import importlib.util
import shlex

import pytest

from streaming_pipeline.devstack import cli


@pytest.mark.parametrize("command", ["stack", "demo", "bench"])
def test_a_stack_command_without_the_stack_extra_names_the_extra(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    argv = {"stack": ["stack", "status"], "demo": ["demo"], "bench": ["bench"]}[command]
    assert cli.main(argv) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: `streaming-pipeline {command}` runs the development stack")
    assert "(no fastapi)" in error and "pip install 'streaming-pipeline[stack]'" in error


def test_jars_fetch_takes_every_set_by_default_the_named_ones_else_and_refuses_an_unknown_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming_pipeline.lakehouse.engine import jars

    resolved: list[str] = []

    def resolve(artifacts: jars.ArtifactSet, force: bool = False) -> list[object]:
        resolved.append(artifacts.name)
        return []

    monkeypatch.setattr(jars, "resolve", resolve)
    monkeypatch.setattr("streaming_pipeline.lakehouse.engine.log_store.log_store_jar", lambda *a: None)
    assert list(jars.artifact_sets()) == ["kafka", "spark", "object-store", "s3a", "metastore-jdbc"]
    every = [artifacts.name for artifacts in jars.artifact_sets().values()]
    assert cli.main(["jars", "fetch"]) == 0 and resolved == every
    resolved.clear()
    assert cli.main(["jars", "fetch", "s3a"]) == 0 and resolved == [jars.s3a_artifacts().name]
    with pytest.raises(SystemExit):
        cli.main(["jars", "fetch", "bogus"])
    assert (
        "'bogus' is no artifact set; choose from kafka, spark, object-store, s3a, metastore-jdbc"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "benchmark", "handler"),
    [
        (["bench"], "throughput", "_run_throughput_bench"),
        (["bench", "--rides", "300", "200"], "throughput", "_run_throughput_bench"),
        (["bench", "live", "--repeat", "3"], "live", "_run_live_bench"),
        (["bench", "run"], "run", "_run_cost_bench"),
    ],
)
def test_a_bench_is_a_subcommand_and_bench_alone_is_throughput(
    argv: list[str], benchmark: str, handler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = cli.parse_args(argv)
    assert (args.command, args.bench_command, args.handler.__name__) == ("bench", benchmark, handler)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "benchmark", "handler", "new_form"),
    [
        (
            ["bench", "--stack-dir", "s", "--live", "--mode", "continuous", "--env", "A=1 s"],
            "live",
            "_run_live_bench",
            "bench live --stack-dir s --mode continuous --env 'A=1 s'",
        ),
        (["bench", "--windows", "--runs", "3"], "windows", "_run_windows_bench", "bench windows --runs 3"),
        (["bench", "--soak", "--commits", "2"], "soak", "_run_soak_bench", "bench soak --commits 2"),
        (["bench", "--run", "--object-store"], "run", "_run_cost_bench", "bench run --object-store"),
    ],
)
def test_the_old_bench_flags_are_deprecated_aliases_of_the_subcommands(
    argv: list[str], benchmark: str, handler: str, new_form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = cli.parse_args(argv)
    assert (args.bench_command, args.handler.__name__) == (benchmark, handler)
    # The same as the new form, which the one-line note names.
    assert args == cli.build_parser().parse_args(shlex.split(new_form))
    flag = next(option for option in argv if option in cli.BENCH_FLAGS)
    assert capsys.readouterr().err == (
        f"warning: `bench {flag}` is deprecated (gone in 0.11.0); use: streaming-pipeline {new_form}\n"
    )
    with pytest.raises(SystemExit):  # one benchmark at a time
        cli.parse_args([*argv, "--soak" if flag != "--soak" else "--live"])
