#!/usr/bin/env bash
# The `spark-connect` service of docker-compose.yml: the Spark Connect server, driver of the standalone cluster.
#
# Launched the way streaming_pipeline/devstack/embedded/spark_connect.py launches the embedded one: pyspark's own
# bin/spark-submit with the SparkConnectServer class, the project's jars with --jars (resolved into the image by
# `streaming-pipeline jars fetch`; executors fetch them from this driver) and the settings of
# spark_conf/<profile>.conf. foreachBatch functions run in a Python worker that this server starts, so
# PYSPARK_PYTHON is the image's Python, which has the project installed.
#
# Environment (all optional): SPARK_MASTER (spark://spark-master:7077), SPARK_PROFILE (cluster),
# SPARK_CONNECT_PORT (15002), SPARK_CONNECT_BIND_ADDRESS (0.0.0.0), SPARK_DRIVER_HOST (this hostname: the name
# executors connect back to), SPARK_WAREHOUSE_DIR ($LAKEHOUSE_DIR/_warehouse), SPARK_METASTORE_DIR
# (/lakehouse/_metastore: the table catalog's Hive metastore, embedded Derby, as the embedded stack's engine keeps
# one; on the lakehouse volume, so the names outlive the container). Extra arguments are passed to spark-submit
# after the generated ones, so `--conf key=value` there overrides.
set -euo pipefail

# The profiles ship inside the installed package (spark_conf/ as package data).
conf_dir="${STREAMING_PIPELINE_SPARK_CONF_DIR:-$(python -c 'from importlib.resources import files; print(files("streaming_pipeline.lakehouse") / "spark_profiles")')}"
profile="${SPARK_PROFILE:-cluster}"
conf_file="$conf_dir/$profile.conf"
master="${SPARK_MASTER:-spark://spark-master:7077}"
port="${SPARK_CONNECT_PORT:-15002}"
bind_address="${SPARK_CONNECT_BIND_ADDRESS:-0.0.0.0}"
driver_host="${SPARK_DRIVER_HOST:-$(hostname)}"
warehouse_dir="${SPARK_WAREHOUSE_DIR:-${LAKEHOUSE_DIR:-/lakehouse}/_warehouse}"
metastore_dir="${SPARK_METASTORE_DIR:-/lakehouse/_metastore}"
log4j_file="${SPARK_CONNECT_LOG4J:-$(dirname "$(readlink -f "$0")")/spark-connect-log4j2.properties}"
python="${PYSPARK_PYTHON:-$(command -v python3)}"

# pyspark's package directory is a Spark distribution (bin/, jars/ with the spark-connect jar).
SPARK_HOME="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
export PYSPARK_PYTHON="$python" PYSPARK_DRIVER_PYTHON="$python"
# The server is the engine, not a client of one.
unset SPARK_REMOTE SPARK_CONNECT_MODE_ENABLED

# Delta, the Kafka source and Avro: already in the image's cache, so this only reads classpath.txt.
classpath="$(streaming-pipeline jars path spark)"
if [ -z "$classpath" ]; then
  echo "start-spark-connect: \`streaming-pipeline jars path spark\` printed no jars" >&2
  exit 1
fi
jars="${classpath//:/,}"

# spark_conf/<profile>.conf is in spark-defaults.conf format: key, whitespace, value; # comments.
if [ ! -f "$conf_file" ]; then
  echo "start-spark-connect: Spark profile file not found: $conf_file" >&2
  exit 1
fi
conf_args=()
while read -r key value || [ -n "$key" ]; do
  case "$key" in
    '' | '#'*) continue ;;
  esac
  if [ -z "$value" ]; then
    echo "start-spark-connect: $conf_file: expected 'key value', got '$key'" >&2
    exit 1
  fi
  conf_args+=(--conf "$key=$value")
done < "$conf_file"

mkdir -p "$metastore_dir"

echo "start-spark-connect: sc://$driver_host:$port on $bind_address, master $master, profile $profile," \
  "$(tr -cd ',' <<< "$jars" | wc -c | awk '{print $1 + 1}') jars" >&2

exec "$SPARK_HOME/bin/spark-submit" \
  --class org.apache.spark.sql.connect.service.SparkConnectServer \
  --name "streaming-pipeline Spark Connect" \
  --master "$master" \
  --jars "$jars" \
  --driver-java-options "-Dlog4j2.configurationFile=$log4j_file" \
  "${conf_args[@]}" \
  --conf "spark.driver.host=$driver_host" \
  --conf "spark.driver.bindAddress=0.0.0.0" \
  --conf "spark.connect.grpc.binding.address=$bind_address" \
  --conf "spark.connect.grpc.binding.port=$port" \
  --conf "spark.sql.warehouse.dir=$warehouse_dir" \
  --conf "spark.sql.catalogImplementation=hive" \
  --conf "spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName=$metastore_dir/metastore_db;create=true" \
  --conf "spark.connect.session.manager.defaultSessionTimeout=30m" \
  "$@"
