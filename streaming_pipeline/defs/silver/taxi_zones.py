"""The taxi-zone lookup as a Delta table: the static side of the enrichment join."""

from pathlib import Path

import dagster as dg
from pydantic import field_validator

from streaming_pipeline.components.asset_metadata import SPARK_KINDS, delta_table_metadata, table_args
from streaming_pipeline.components.parameters import parameter, with_environment_defaults
from streaming_pipeline.components.streamed_table import with_config_class
from streaming_pipeline.lakehouse.errors import ConfigurationError
from streaming_pipeline.lakehouse.settings import LiveSettings
from streaming_pipeline.lakehouse.silver.taxi_zones import refresh_taxi_zones, shipped_taxi_zones_csv
from streaming_pipeline.lakehouse.tables import TAXI_ZONES
from streaming_pipeline.resources import LakehouseResource, SparkResource
from streaming_pipeline.resources.lakehouse import naming_a_store_gone_away


class TaxiZonesConfig(dg.Config):
    csv_path: str | None = parameter(
        env="TAXI_ZONES_CSV",
        default=None,
        kind="file",
        description="The zone lookup CSV to load",
        shown_default="the TLC lookup shipped with the package",
    )

    @field_validator("csv_path")
    @classmethod
    def _existing_file(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ConfigurationError(f"taxi_zones csv_path={value!r}: no such file")
        return value


def taxi_zones_asset(live: LiveSettings) -> dg.AssetsDefinition:
    """The lookup's asset, its csv_path defaulting to TAXI_ZONES_CSV as the environment says now."""
    config = with_environment_defaults(TaxiZonesConfig)
    return dg.asset(
        name=TAXI_ZONES.name,
        **table_args(
            TAXI_ZONES,
            kinds={"csv", *SPARK_KINDS},
            live=live,
            # Loaded once by Dagster's automation sensor when missing (on_missing() fires only when a target becomes
            # missing, never for one missing since the first tick); a failed load waits for someone to fix the CSV.
            automation_condition=dg.AutomationCondition.missing()
            & ~dg.AutomationCondition.in_progress()
            & ~dg.AutomationCondition.execution_failed(),
            streamed=False,
        ),
    )(naming_a_store_gone_away(with_config_class(taxi_zones, config)))


@dg.definitions
def defs(context: dg.ComponentLoadContext) -> dg.Definitions:
    """Read when the definitions load: TAXI_ZONES_CSV."""
    return dg.Definitions(assets=[taxi_zones_asset(LiveSettings.from_env())])


def taxi_zones(
    context: dg.AssetExecutionContext, config: TaxiZonesConfig, spark: SparkResource, lakehouse: LakehouseResource
):
    """The NYC TLC taxi-zone lookup (265 zones) as a Delta table: the static side of the enrichment join.
    Loaded from the lookup shipped with the package, or config csv_path (TAXI_ZONES_CSV); rewritten only when it
    changed."""
    session = spark.get_session()
    csv_path = config.csv_path or shipped_taxi_zones_csv()
    changed = refresh_taxi_zones(session, lakehouse, csv_path)
    context.log.info(f"taxi_zones {'loaded from' if changed else 'unchanged, as in'} {csv_path}")
    return dg.MaterializeResult(
        metadata={
            "source_csv": dg.MetadataValue.path(csv_path),
            "changed": dg.MetadataValue.bool(changed),
            **delta_table_metadata(session, lakehouse, TAXI_ZONES, preview_order=["location_id"]),
        }
    )
