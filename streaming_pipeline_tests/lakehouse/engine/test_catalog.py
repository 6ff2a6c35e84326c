"""The shared metastore's settings file, read back as Hadoop reads a configuration: every model class of the Hive
metastore client pyspark ships (counted here from its own package.jdo), the password only in the file (mode 0600)
and escaped as XML needs, nothing secret in the driver's settings. That engines and a session of their own share
it is test_cluster_vs_local's."""

from __future__ import annotations

import re
import stat
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from streaming_pipeline.lakehouse.engine.catalog import (
    metastore_model_classes,
    shared_metastore_conf,
    write_shared_metastore_site,
)
from streaming_pipeline.lakehouse.engine.jars import pyspark_home


def _site_properties(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {prop.findtext("name") or "": prop.findtext("value") or "" for prop in root.iter("property")}


def test_the_model_classes_are_every_class_of_the_metastore_package() -> None:
    (jar,) = (pyspark_home() / "jars").glob("hive-metastore-*.jar")
    with zipfile.ZipFile(jar) as archive:
        declared = re.findall(rb'<class name="(\w+)"', archive.read("package.jdo"))
    classes = metastore_model_classes()
    assert len(classes) == len(declared) == len(set(classes)) > 20
    assert "org.apache.hadoop.hive.metastore.model.MTable" in classes
    assert "org.apache.hadoop.hive.metastore.model.MTablePrivilege" in classes


def test_the_site_file_holds_the_password_escaped_and_private(tmp_path: Path) -> None:
    secret = 'pa<ss>&"word'
    url = "jdbc:postgresql://127.0.0.1:5432/metastore"
    directory = write_shared_metastore_site(tmp_path / "catalog", url, "dagster", secret)
    site = directory / "hive-site.xml"
    assert stat.S_IMODE(site.stat().st_mode) == 0o600
    properties = _site_properties(site)
    assert properties["javax.jdo.option.ConnectionPassword"] == secret
    assert properties["javax.jdo.option.ConnectionURL"] == url
    assert properties["datanucleus.autoStartMechanism"] == "Classes"
    assert properties["datanucleus.autoStartClassNames"].split(",") == metastore_model_classes()
    # Written again (a restart with a new password file): replaced, still private.
    write_shared_metastore_site(directory, url, "dagster", "other")
    assert _site_properties(site)["javax.jdo.option.ConnectionPassword"] == "other"
    assert stat.S_IMODE(site.stat().st_mode) == 0o600

    jar = tmp_path / "postgresql.jar"
    conf = shared_metastore_conf(directory, [jar])
    assert conf == {
        "spark.sql.catalogImplementation": "hive",
        "spark.driver.extraClassPath": f"{directory}:{jar}",
    }
