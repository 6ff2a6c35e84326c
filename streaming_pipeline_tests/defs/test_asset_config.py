"""The assets' parameters are their run config: defaults from the environment, read and checked when definitions
load, and a bad value (from the environment or the launchpad) is an error naming it."""

from __future__ import annotations

import pytest

from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import PipelineSettings
from streaming_pipeline_tests.error_helpers import error_chain
from streaming_pipeline_tests.project_tables import default_config, default_high_amount_threshold


def test_the_defaults_are_the_documented_ones() -> None:
    windows, join = default_config("ride_window_aggregates"), default_config("ride_pickup_joins")
    assert (windows.window_duration, windows.watermark_delay) == ("10 minutes", "15 minutes")
    assert (join.join_max_gap, join.watermark_delay) == ("10 minutes", "15 minutes")
    assert default_high_amount_threshold() == 40.0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: type(default_config("ride_window_aggregates"))(window_duration="ten minutes"),
            "ride_window_aggregates window_duration='ten minutes'",
        ),
        (
            lambda: type(default_config("ride_window_aggregates"))(watermark_delay="0 seconds"),
            "ride_window_aggregates watermark_delay='0 seconds'",
        ),
        (
            lambda: type(default_config("ride_pickup_joins"))(join_max_gap="10 parsecs"),
            "ride_pickup_joins join_max_gap='10 parsecs'",
        ),
    ],
)
def test_a_bad_value_from_the_launchpad_is_refused_by_name(make, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RIDE_WINDOW_DURATION", "10 mins", "RIDE_WINDOW_DURATION='10 mins' is not a positive interval"),
        ("JOIN_MAX_GAP", "-5 minutes", "JOIN_MAX_GAP='-5 minutes' is not a positive interval"),
        ("HIGH_AMOUNT_THRESHOLD", "forty", "HIGH_AMOUNT_THRESHOLD='forty' is not a number"),
    ],
)
def test_a_bad_parameter_default_is_refused_when_definitions_load(
    variable: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streaming_pipeline.definitions import build_definitions

    monkeypatch.setenv(variable, value)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - Dagster wraps the error of the module that declares it
        build_definitions()
    refused = [e for e in error_chain(caught.value) if isinstance(e, ConfigurationError)]
    assert refused and message in str(refused[0])


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("KAFKA_SSL_CA_LOCATION", "/no/ca.pem", "KAFKA_SSL_CA_LOCATION='/no/ca.pem': no such file"),
        ("KAFKA_SSL_KEYSTORE_LOCATION", "/no/client.pem", "KAFKA_SSL_KEYSTORE_LOCATION='/no/client.pem': no such"),
        ("SCHEMA_REGISTRY_SSL_CA_LOCATION", "/no/ca.pem", "SCHEMA_REGISTRY_SSL_CA_LOCATION='/no/ca.pem': no such"),
        ("SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION", "/no/c.pem", "SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION='/no/c.pem'"),
    ],
)
def test_a_bad_default_is_refused_when_definitions_load(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PipelineSettings.from_env({variable: value})


def test_the_tls_files_reach_the_resources_as_absolute_paths_and_the_secrets_as_env_vars(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streaming_pipeline.resources.from_settings import build_resources

    (tmp_path / "ca.pem").write_text("ca")
    (tmp_path / "client.pem").write_text("key and chain")
    monkeypatch.chdir(tmp_path)
    settings = PipelineSettings.from_env(
        {
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_USERNAME": "pipeline",
            "KAFKA_SASL_PASSWORD": "s3cret",
            "KAFKA_SSL_CA_LOCATION": "ca.pem",
            "KAFKA_SSL_KEYSTORE_LOCATION": "client.pem",
            "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "pipeline:s3cret",
            "SCHEMA_REGISTRY_SSL_CA_LOCATION": "ca.pem",
            "SCHEMA_REGISTRY_SSL_KEYSTORE_LOCATION": "client.pem",
        }
    )
    assert "s3cret" not in repr(settings)
    resources = build_resources(settings)
    kafka, registry = resources["kafka"], resources["schema_registry"]
    ca, client = str(tmp_path / "ca.pem"), str(tmp_path / "client.pem")
    assert (kafka.ssl_ca_location, kafka.ssl_keystore_location) == (ca, client)
    assert (registry.ssl_ca_location, registry.ssl_keystore_location) == (ca, client)
    # the secrets by name: dg.EnvVar, read when a run starts
    assert (kafka.sasl_password, registry.basic_auth_user_info) == (
        "KAFKA_SASL_PASSWORD",
        "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO",
    )


def test_the_defaults_come_from_the_environment_when_the_definitions_are_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """One process builds the definitions twice: each time the assets' and the continuous job's config defaults are
    what the environment says then."""
    import dagster as dg

    from streaming_pipeline.definitions import build_definitions

    def defaults(defs: dg.Definitions) -> dict[str, dict[str, object]]:
        def asset_defaults(table: str) -> dict[str, object]:
            node = defs.resolve_assets_def(table).node_def
            assert node.config_schema is not None
            return {k: f.default_value for k, f in node.config_schema.config_type.fields.items()}  # type: ignore[union-attr]

        continuous = defs.resolve_job_def("continuous_streams_job").run_config_schema.config_type.fields["ops"]
        return {
            "high_amount_rides": asset_defaults("high_amount_rides"),
            "low_amount_rides": asset_defaults("low_amount_rides"),
            "ride_pickup_joins": asset_defaults("ride_pickup_joins"),
            "ride_window_aggregates": asset_defaults("ride_window_aggregates"),
            "continuous": continuous.default_value["continuous_streams"]["config"],
        }

    first = defaults(build_definitions())
    monkeypatch.setenv("HIGH_AMOUNT_THRESHOLD", "55.5")
    monkeypatch.setenv("JOIN_MAX_GAP", "3 minutes")
    monkeypatch.setenv("RIDE_WINDOW_DURATION", "5 minutes")
    monkeypatch.setenv("RIDE_WATERMARK_DELAY", "1 minute")
    second = defaults(build_definitions())
    assert first["high_amount_rides"] == first["low_amount_rides"] == {"high_amount_threshold": 40.0}
    assert first["ride_pickup_joins"] == {"join_max_gap": "10 minutes", "watermark_delay": "15 minutes"}
    assert first["ride_window_aggregates"] == {"window_duration": "10 minutes", "watermark_delay": "15 minutes"}
    assert second["high_amount_rides"] == second["low_amount_rides"] == {"high_amount_threshold": 55.5}
    assert second["ride_pickup_joins"] == {"join_max_gap": "3 minutes", "watermark_delay": "1 minute"}
    assert second["ride_window_aggregates"] == {"window_duration": "5 minutes", "watermark_delay": "1 minute"}
    # The continuous run takes each step's parameters as its asset does.
    steps = ("high_amount_rides", "low_amount_rides", "ride_pickup_joins")
    assert {step: second["continuous"][step] for step in steps} == {step: second[step] for step in steps}
    assert second["continuous"]["ride_window_aggregates"] == second["ride_window_aggregates"]


def parameter_rows() -> list[str]:
    """docs/configuration.md's rows of the assets' defaults, rendered from the parameters the assets' config classes
    declare: one per parameter, by asset."""
    import inspect

    from streaming_pipeline.components.parameters import parameters_of
    from streaming_pipeline.definitions import build_definitions

    rows = []
    defs = build_definitions()
    ops = {}
    for key in defs.resolve_asset_graph().get_all_asset_keys():
        assets_def = defs.resolve_assets_def(key)
        ops[assets_def.op.name] = assets_def
    for op_name in sorted(ops):
        compute = ops[op_name].op.compute_fn.decorated_fn  # type: ignore[union-attr]
        config = inspect.signature(compute).parameters.get("config")
        if config is None:
            continue
        for p in parameters_of(config.annotation):
            what = p.description[0].lower() + p.description[1:]
            rows.append(f"| `{p.env}` | `{p.shown_default}` | `{op_name}` config `{p.field}`: {what} |")
    return rows


def test_the_docs_table_of_the_assets_defaults_is_rendered_from_their_parameters() -> None:
    from streaming_pipeline_tests.kafka_helpers import REPO_ROOT

    text = (REPO_ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## The assets' defaults", 1)[1].split("\n## ", 1)[0]
    documented = [line for line in section.splitlines() if line.startswith("| `")]
    expected = parameter_rows()
    # A variable several assets read (RIDE_WATERMARK_DELAY) has one default.
    defaults: dict[str, set[str]] = {}
    for row in expected:
        variable, default = row.split(" | ")[:2]
        defaults.setdefault(variable, set()).add(default)
    assert all(len(shown) == 1 for shown in defaults.values()), defaults
    assert documented == expected, "docs/configuration.md's assets' defaults should read:\n" + "\n".join(expected)


def test_a_parameter_of_an_unknown_kind_is_refused_naming_it() -> None:
    from streaming_pipeline.components.parameters import parameter

    with pytest.raises(ValueError, match="parameter SOME_VAR: kind 'duration' is not one of number, interval, file"):
        parameter(env="SOME_VAR", default=1.0, kind="duration", description="Anything")
