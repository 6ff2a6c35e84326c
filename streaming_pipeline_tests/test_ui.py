"""The Dagster UI in a real browser: the webserver on the project's definitions and the instance of the session's
materialized lakehouse (every asset materialized twice), pages in headless Chromium.

Nothing here connects to Kafka, the registry or Spark: loading definitions only builds resource
objects, so their addresses point at closed ports. The asset graph screenshot is saved to
`test-artifacts/asset_graph.png` for people (and CI artifacts) to look at.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming_pipeline.devstack.embedded.ports import free_port
from streaming_pipeline_tests.materialized_lakehouse import MaterializedLakehouse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO_ROOT / "test-artifacts" / "asset_graph.png"

ASSET_NAMES = (
    "raw_rides",
    "raw_pickup_locations",
    "dead_letter_records",
    "vendor_counts",
    "ride_window_aggregates",
    "ride_pickup_joins",
    "join_late_rows",
    "high_amount_rides",
    "low_amount_rides",
    "taxi_zones",
    "taxi_zones_history",
    "rides_enriched",
)
GROUPS = ("bronze", "silver", "gold")

# Catalog as a flat table of every asset (the default catalog view may group or paginate).
ASSETS_PAGE = "/assets?view=flat"
# Global lineage; with several groups Dagster collapses them unless `expanded` lists their ids
# (`global@global:<group>`, persisted in the query string by the graph explorer).
GRAPH_PAGE = "/asset-groups?expanded=" + "%2C".join(f"global%40global%3A{group}" for group in GROUPS)

# The graph is drawn at up to 100% zoom, and only the nodes inside the viewport are in the DOM: a 3200x4800
# CSS-pixel viewport at device scale 0.5 holds the whole graph (three groups stacked, 12 assets) and gives a
# 1600x2400 image.
WINDOW = ("--window-size=3200,4800", "--force-device-scale-factor=0.5")
BUDGETS_MS = (15_000, 30_000)  # virtual time per attempt; the second attempt only if the first was short
CHROMIUM_TIMEOUT_S = 60
SERVER_START_TIMEOUT_S = 60


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def webserver_url(
    materialized_lakehouse: MaterializedLakehouse, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: the browser test needs Debian's chromium (apt-get install -y chromium)")
    root = tmp_path_factory.mktemp("dagster_ui")
    home = materialized_lakehouse.dagster_home  # its dagster.yaml turns off the "join the community" dialog
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "SCHEMA_REGISTRY_URL": "http://127.0.0.1:1",
        "LAKEHOUSE_DIR": str(materialized_lakehouse.lakehouse),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("SPARK_MASTER", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO"):
        env.pop(name, None)
    log_path = root / "webserver.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster_webserver",
                "-m",
                "streaming_pipeline.definitions",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the code server it spawns stops with it
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"dagster-webserver exited with {process.returncode}:\n{_log_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"dagster-webserver did not answer /server_info in {SERVER_START_TIMEOUT_S}s:\n"
                    f"{_log_tail(log_path)}"
                )
            time.sleep(0.5)
        yield url
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _chromium(url: str, *args: str, budget_ms: int) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--mute-audio",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            *WINDOW,
            *args,
            url,
        ]
        return subprocess.run(command, cwd=profile, capture_output=True, timeout=CHROMIUM_TIMEOUT_S, check=False)


def _dump_dom(url: str, expected: tuple[str, ...]) -> tuple[str, list[str]]:
    """The rendered DOM and the expected names it lacks, after a retry with more virtual time."""
    dom, missing = "", list(expected)
    for budget_ms in BUDGETS_MS:
        result = _chromium(url, "--dump-dom", budget_ms=budget_ms)
        dom = result.stdout.decode("utf-8", errors="replace")
        missing = [name for name in expected if name not in dom]
        if not missing:
            break
    return dom, missing


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def test_assets_page_lists_every_asset(webserver_url: str) -> None:
    _, missing = _dump_dom(webserver_url + ASSETS_PAGE, ASSET_NAMES)
    assert not missing, f"{ASSETS_PAGE} does not show {missing}"


def test_asset_graph_renders_and_is_saved(webserver_url: str) -> None:
    _, missing = _dump_dom(webserver_url + GRAPH_PAGE, ASSET_NAMES + GROUPS)
    assert not missing, f"the asset graph ({GRAPH_PAGE}) does not show {missing}"

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-shot-") as out:
        shot = Path(out) / "asset_graph.png"
        result = _chromium(webserver_url + GRAPH_PAGE, f"--screenshot={shot}", budget_ms=BUDGETS_MS[0])
        assert shot.is_file(), f"chromium wrote no screenshot: {result.stderr.decode(errors='replace')[-2000:]}"
        shutil.move(str(shot), SCREENSHOT)

    width, height = _png_size(SCREENSHOT)
    assert (width, height) >= (1200, 800), f"screenshot is only {width}x{height}"
    # A blank or spinner-only page compresses to a few kB; the rendered graph is around 100 kB.
    assert SCREENSHOT.stat().st_size > 30_000, f"screenshot is suspiciously small ({SCREENSHOT.stat().st_size} B)"


def test_an_asset_page_names_its_table_in_the_catalog(webserver_url: str) -> None:
    """Each table's asset carries its catalog name (`dagster/table_name`), which its page shows."""
    _, missing = _dump_dom(webserver_url + "/assets/vendor_counts", ("gold.vendor_counts",))
    assert not missing, "the vendor_counts asset's page does not show its catalog name gold.vendor_counts"
