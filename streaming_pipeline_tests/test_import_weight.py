"""The sensors and the checks load without Spark.

The Dagster daemon evaluates the offset sensors, and a code server loads the checks with them: importing pyspark
there loads Spark's client in processes that only read offsets and Delta logs. So every module that defines a sensor
or an asset check imports pyspark inside the functions that run Spark, never at the top, nor through what it
imports. This test imports each of them in a fresh interpreter (the test process has pyspark loaded
already), as `test_foreach_batch_handlers` loads the handlers without Dagster.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import json
import pkgutil
import re
import subprocess
import sys

#: The packages where the code location defines its sensors and checks: the component types and `defs/`.
PACKAGES = ("streaming_pipeline.components", "streaming_pipeline.defs")

# Imports each module named in argv in turn; prints one JSON object: the modules imported, and for the first one
# after which some pyspark module was loaded, those modules.
_PROBE = """
import importlib, json, sys

probed, culprit = [], None
for name in sys.argv[1:]:
    importlib.import_module(name)
    probed.append(name)
    spark = sorted(m for m in sys.modules if m == "pyspark" or m.startswith("pyspark."))
    if spark and culprit is None:
        culprit = {"module": name, "pyspark": spark[:10]}
print(json.dumps({"probed": probed, "culprit": culprit}))
"""


def _dagster_names(tree: ast.Module) -> set[str]:
    """The names the module uses from dagster: `dg.X` (whatever it calls the module) and `from dagster import X`."""
    aliases: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "dagster"}
        elif isinstance(node, ast.ImportFrom) and node.module == "dagster":
            names |= {a.name for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


def _parsed(source: str, filename: str) -> ast.Module:
    """`ast.parse` with no garbage collection while it runs. In this process a collection can run a finalizer that
    logs a traceback (SQLAlchemy's pool does), and Python 3.11 parses source again to print a traceback: ast.parse
    entered again from inside itself fails with "SystemError: AST constructor recursion depth mismatch"."""
    gc.collect()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        gc.enable()


def _about_sensors_or_checks(name: str) -> bool:
    """A word of `name` (snake_case or CamelCase) is sensor(s) or check(s); not `checkpoint_pools`."""
    return any(word.lower() in _WORDS for word in re.findall(r"[A-Z]?[a-z]+", name))


_WORDS = {"sensor", "sensors", "check", "checks"}


def _is_sensor_or_check_module(name: str) -> bool:
    """Named for sensors or checks (`sensors`, `live_checks`), or using Dagster's sensor or check API (`@dg.sensor`,
    `@dg.asset_check`, `dg.AutomationConditionSensorDefinition`, `dg.AssetCheckResult`, ...)."""
    if _about_sensors_or_checks(name.rsplit(".", 1)[-1]):
        return True
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    with open(spec.origin, encoding="utf-8") as source:
        used = _dagster_names(_parsed(source.read(), spec.origin))
    return any(_about_sensors_or_checks(n) for n in used)


def sensor_and_check_modules() -> list[str]:
    """Every module of `PACKAGES` that defines sensors or checks (or helps to), by `_is_sensor_or_check_module`."""
    found = []
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        found += [i.name for i in pkgutil.walk_packages(path, prefix=package + ".") if not i.ispkg]
    return sorted(m for m in found if _is_sensor_or_check_module(m))


def test_every_sensor_and_check_module_imports_without_pyspark() -> None:
    modules = sensor_and_check_modules()
    assert {
        "streaming_pipeline.components.kafka_delta_source.sensors",  # the offset sensors
        "streaming_pipeline.components.kafka_delta_source.checks",  # the bronze checks
        "streaming_pipeline.components.continuous.sensor",
        "streaming_pipeline.defs.automation",
        "streaming_pipeline.components.continuous.checks_schedule",
    } <= set(modules), modules
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["probed"] == modules
    assert report["culprit"] is None, (
        f"importing {report['culprit']['module']} (after {modules[: modules.index(report['culprit']['module'])]}) "
        f"loaded {report['culprit']['pyspark']}: import pyspark inside the functions that use it"
    )
