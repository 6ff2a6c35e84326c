# The project image of docker-compose.yml: the package, a JRE and the project's Spark jars. It runs the Spark
# Connect server (the Spark driver; its foreachBatch Python workers import the project) and the Dagster
# webserver and daemon (Spark Connect clients).
# bookworm, not the default slim base: Debian 13 (trixie) has no openjdk-17 package.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The JRE's postinst needs the man directory that slim images leave out.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

# uid/gid 185 = the `spark` user of the apache/spark images: the Spark driver (spark-connect) and the
# executors (spark-worker) then write the shared lakehouse volume as the same user.
RUN groupadd --system --gid 185 dagster \
    && useradd --system --uid 185 --gid 185 --create-home --home-dir /home/dagster dagster

WORKDIR /opt/streaming-pipeline

# Dependencies first (cached while only the code changes): an editable install of a stub package,
# whose directory the real package then fills. dagster-postgres is for the compose instance only.
COPY pyproject.toml README.md ./
RUN mkdir streaming_pipeline && touch streaming_pipeline/__init__.py \
    && pip install -e . dagster-postgres

ENV DAGSTER_HOME=/opt/dagster/home \
    LAKEHOUSE_DIR=/lakehouse \
    STREAMING_PIPELINE_CACHE_DIR=/opt/streaming-pipeline/cache \
    STREAMING_PIPELINE_SCHEMA_DIR=/opt/streaming-pipeline/schemas \
    STREAMING_PIPELINE_SPARK_CONF_DIR=/opt/streaming-pipeline/spark_conf

COPY workspace.yaml ./
COPY schemas ./schemas
COPY spark_conf ./spark_conf
COPY streaming_pipeline ./streaming_pipeline

# Every Java artifact, resolved now (Apache Ivy from pyspark's jars/, Maven Central) into the image's
# cache, so that nothing resolves when a container starts and the containers need no Maven access.
# Only the retrieved jars (jars/<set>/lib, listed by classpath.txt) are used: Ivy's download cache goes.
# The cache stays root-owned and read-only for uid 185.
RUN streaming-pipeline jars fetch \
    && rm -rf "$STREAMING_PIPELINE_CACHE_DIR/jars/ivy-cache" "$STREAMING_PIPELINE_CACHE_DIR/jars/ivy-home" \
    && streaming-pipeline jars path spark | tr ':' '\n' | xargs ls -l

COPY docker/dagster.yaml /opt/dagster/home/dagster.yaml
COPY docker/start-spark-connect.sh docker/spark-connect-log4j2.properties ./docker/

RUN chmod 0755 docker/start-spark-connect.sh \
    && bash -n docker/start-spark-connect.sh \
    && mkdir -p /opt/dagster/storage /lakehouse \
    && chown -R 185:185 /opt/dagster /lakehouse /home/dagster \
    && python -c "import streaming_pipeline.definitions, dagster_postgres"

USER 185:185
# 3000: Dagster webserver; 15002: Spark Connect (gRPC); 4040: the Spark driver's UI.
EXPOSE 3000 15002 4040
CMD ["dagster-webserver", "-h", "0.0.0.0", "-p", "3000", "-w", "workspace.yaml"]
