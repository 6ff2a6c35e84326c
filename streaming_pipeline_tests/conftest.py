"""Shared fixtures: the Spark session, the sample data, and (for integration tests) the embedded stack."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from streaming_pipeline.devstack.embedded.stack import StackInfo
from streaming_pipeline_tests.session_stack import SessionStack

if TYPE_CHECKING:
    from streaming_pipeline_tests.materialized_lakehouse import MaterializedLakehouse

# The tests' own sample: 266 real NYC TLC yellow-taxi rides (public TLC trip records), in the TLC CSV header.
SAMPLE_RIDES = Path(__file__).resolve().parent / "data" / "rides.csv"

# The TLC CSV header of rides.csv -> the raw_rides column it becomes (docs/tables.md), written out here so
# that tests compute their expectations independently of the package's own CSV reader.
TLC_RIDE_COLUMNS = {
    "VendorID": "vendor_id",
    "tpep_pickup_datetime": "pickup_datetime",
    "tpep_dropoff_datetime": "dropoff_datetime",
    "passenger_count": "passenger_count",
    "trip_distance": "trip_distance",
    "RatecodeID": "rate_code_id",
    "store_and_fwd_flag": "store_and_fwd_flag",
    "PULocationID": "pu_location_id",
    "DOLocationID": "do_location_id",
    "payment_type": "payment_type",
    "fare_amount": "fare_amount",
    "extra": "extra",
    "mta_tax": "mta_tax",
    "tip_amount": "tip_amount",
    "tolls_amount": "tolls_amount",
    "improvement_surcharge": "improvement_surcharge",
    "total_amount": "total_amount",
    "congestion_surcharge": "congestion_surcharge",
}


@pytest.fixture(scope="session")
def rides_csv() -> Path:
    """The real NYC TLC sample (266 rides) that the repository ships as its test data."""
    return SAMPLE_RIDES


@pytest.fixture(scope="session", autouse=True)
def spark_scratch_in_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spark's scratch space (SPARK_LOCAL_DIRS) in the session's temporary directory, for this process and every
    process it starts: a driver that is killed (the kill fuzz, a stopped run) cannot delete its copies of the
    engine's jars (hundreds of MiB with S3A's) and would leave them in /tmp; pytest removes old sessions' folders."""
    scratch = tmp_path_factory.getbasetemp() / "spark-scratch"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("SPARK_LOCAL_DIRS", str(scratch))
        yield scratch


@pytest.fixture(scope="session", autouse=True)
def java_artifacts_resolving_from_the_start(request: pytest.FixtureRequest) -> Iterator[None]:
    """The jar sets the collected tests will need, resolved from the session's start, each in a thread of its own:
    into an empty cache (CI's) the downloads then overlap one another and the first tests, instead of each holding
    up the first test that needs it (S3A's 690 MB, s3proxy's 152 jars). A test that needs a set still being
    resolved waits for it (one resolution per set: `jars.resolve` holds the set's lock); a set that fails to
    resolve here is resolved again, with its error, by the test that needs it."""
    from streaming_pipeline.lakehouse.engine import jars

    needed = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    sets = []
    if "spark" in needed:
        sets.append(jars.spark_artifacts)
    if "session_stack" in needed or "secured_stack" in needed:
        sets.append(jars.kafka_broker_artifacts)
    if _uses_the_object_store(request.session):
        sets += [jars.s3a_artifacts, jars.object_store_artifacts]

    def resolve(artifacts: jars.ArtifactSet) -> None:
        try:
            jars.resolve(artifacts, progress=None)
        except Exception:  # the test that needs the set resolves it again, and fails with the error
            pass

    threads = [threading.Thread(target=resolve, args=(artifacts(),), daemon=True) for artifacts in sets]
    for thread in threads:
        thread.start()
    yield
    for thread in threads:  # no resolution outlives the session
        thread.join()


SPARK_TEST_CONF = {"spark.master": "local[2]", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"}


def _uses_the_object_store(session: pytest.Session) -> bool:
    return any("session_object_store" in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session")
def session_object_store(session_stack: SessionStack) -> StackInfo:
    """The session stack with its object store (bucket `lakehouse`); tests put their lakehouses under
    `lakehouse_dir` (s3a://lakehouse) with names of their own. The session's Spark reaches it (spark_test_conf)."""
    return session_stack.up(object_store=True)


@pytest.fixture(scope="session")
def spark_test_conf(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The session's Spark settings: SPARK_TEST_CONF and, when a collected test uses the session's object store
    (the materialized lakehouse is on it), S3A's settings for that store. This process then has the store's
    variables until the session ends: the JVM's S3A reads the keys from its environment, and the code location's
    S3 client (the run-start check, the Delta log readers) and every subprocess read them there too."""
    if not _uses_the_object_store(request.session):
        yield dict(SPARK_TEST_CONF)
        return
    from streaming_pipeline.devstack.embedded.object_store import REGION
    from streaming_pipeline.lakehouse.engine.spark import s3a_conf

    store = request.getfixturevalue("session_object_store")
    assert store.object_store_url is not None
    with pytest.MonkeyPatch.context() as environment:
        for name, value in store.object_store_env.items():
            environment.setenv(name, value)
        yield {**SPARK_TEST_CONF, **s3a_conf(store.object_store_url, REGION)}


@pytest.fixture(scope="session")
def spark(spark_test_conf: dict[str, str]) -> Iterator[object]:
    """One local SparkSession for the whole test session: Delta, Kafka and Avro jars (and S3A's when the session
    reads its materialized lakehouse), UTC, UI off."""
    from streaming_pipeline.resources import SparkResource

    session = SparkResource(stop_on_teardown=False, conf=spark_test_conf).get_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def session_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStack]:
    """The session's one embedded stack (see session_stack.py): Kafka and the registry started on first use, the
    Spark Connect engine when a test first asks for it; stopped when the session ends."""
    stack = SessionStack(tmp_path_factory.mktemp("session-stack"))
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture()
def stack(session_stack: SessionStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """The session's Kafka broker with no topic on it, and a schema registry of the test's own (no subject, ids
    from 1), stopped after the test; then every topic the test made is deleted."""
    from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess
    from streaming_pipeline_tests.kafka_helpers import delete_every_topic

    broker = session_stack.up()
    delete_every_topic(broker.bootstrap_servers)
    directory = tmp_path_factory.mktemp("stack")
    try:
        with SchemaRegistryProcess(directory / "registry", log_dir=directory / "logs") as registry:
            yield StackInfo(
                directory,
                broker.bootstrap_servers,
                registry.url,
                kafka_pid=broker.kafka_pid,
                registry_pid=registry.pid,
                kafka_log_file=broker.kafka_log_file,
                registry_log_file=registry.log_file,
            )
    finally:
        delete_every_topic(broker.bootstrap_servers)


@pytest.fixture(scope="session")
def secured_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """The session's secured and replicated Kafka and its registry (`stack up --secure --kafka-brokers 3
    --no-spark`: three KRaft nodes, SASL_SSL with SCRAM users and client certificates; the registry over HTTPS with
    basic auth), for the materialized lakehouse, the live path (test_live.py) and the tests of refused clients.
    The session's engine reads from it as from any Kafka. A test deletes the topics it finds before using it."""
    from streaming_pipeline.devstack.embedded.stack import running_stack

    directory = tmp_path_factory.mktemp("secured-stack")
    with running_stack(directory, secure=True, kafka_brokers=3, spark=False, timeout=180) as info:
        yield info


@pytest.fixture(scope="session")
def materialized_lakehouse(
    secured_stack: StackInfo,
    session_object_store: StackInfo,
    spark: object,
    spark_test_conf: dict[str, str],
    rides_csv: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MaterializedLakehouse]:
    """Every asset materialized for the session from a fixed data set (materialized_lakehouse.py: two runs that
    take records, a third with none), for the tests that only read tables. The records go to the session's secured
    Kafka, cleared, and a secured registry of the fixture's own, kept for the session (the schema ids start at 1,
    so a fresh stack given the same records holds the same bytes). The tables are on the session stack's object store (`s3a://lakehouse/materialized`),
    so every test that reads them reads S3."""
    import dataclasses

    from streaming_pipeline.devstack.embedded.registry_process import SchemaRegistryProcess
    from streaming_pipeline.devstack.embedded.secure import SecureMaterial
    from streaming_pipeline_tests import materialized_lakehouse
    from streaming_pipeline_tests.kafka_helpers import clients_of, delete_every_topic

    root = tmp_path_factory.mktemp("materialized")
    delete_every_topic(clients_of(secured_stack)[0])
    secure = SecureMaterial.read_or_make(secured_stack.directory / "secure")
    with SchemaRegistryProcess(root / "registry", log_dir=root / "logs", secure=secure) as registry:
        stack = dataclasses.replace(
            secured_stack,
            schema_registry_url=registry.url,
            registry_pid=registry.pid,
            registry_log_file=registry.log_file,
            lakehouse_dir=session_object_store.lakehouse_dir,
        )
        yield materialized_lakehouse.build(stack, rides_csv, root, spark_test_conf)


@pytest.fixture()
def lakehouse_dir(tmp_path: Path) -> Path:
    return tmp_path / "lakehouse"


def pipeline_resources_for(
    stack: StackInfo, lakehouse_dir: Path | str, spark_conf: dict[str, str] = SPARK_TEST_CONF
) -> dict[str, object]:
    """The resources `definitions.py` builds, pointed at `stack` and `lakehouse_dir` (a path or an s3a:// URI),
    sharing the session-wide SparkSession."""
    from streaming_pipeline.lakehouse.settings import PipelineSettings
    from streaming_pipeline.resources import SparkResource
    from streaming_pipeline.resources.from_settings import build_resources

    settings = PipelineSettings.from_env(
        {
            **stack.secure_env,  # a secured stack's settings; its secrets are passed as dg.EnvVar all the same
            "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap_servers,
            "SCHEMA_REGISTRY_URL": stack.schema_registry_url,
            "LAKEHOUSE_DIR": str(lakehouse_dir),
        }
    )
    resources: dict[str, object] = dict(build_resources(settings))
    resources["spark"] = SparkResource(stop_on_teardown=False, conf=spark_conf)
    return resources


@pytest.fixture()
def pipeline_resources(
    stack: StackInfo, lakehouse_dir: Path, spark: object, spark_test_conf: dict[str, str]
) -> dict[str, object]:
    """`pipeline_resources_for` the test's stack and lakehouse."""
    return pipeline_resources_for(stack, lakehouse_dir, spark_test_conf)
