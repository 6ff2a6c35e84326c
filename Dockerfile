# Image of the Dagster webserver and daemon of docker-compose.yml: the project + a JRE for the Spark driver.
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

# uid/gid 185 = the `spark` user of the apache/spark images: the Spark driver (here) and the executors
# (spark-worker) then write the shared lakehouse volume as the same user.
RUN groupadd --system --gid 185 dagster \
    && useradd --system --uid 185 --gid 185 --create-home --home-dir /home/dagster dagster

WORKDIR /opt/streaming-pipeline

# Dependencies first (cached while only the code changes): an editable install of a stub package,
# whose directory the real package then fills. dagster-postgres is for the compose instance only.
COPY pyproject.toml README.md ./
RUN mkdir streaming_pipeline && touch streaming_pipeline/__init__.py \
    && pip install -e . dagster-postgres

COPY workspace.yaml ./
COPY schemas ./schemas
COPY spark_conf ./spark_conf
COPY streaming_pipeline ./streaming_pipeline
COPY docker/dagster.yaml /opt/dagster/home/dagster.yaml

RUN mkdir -p /opt/dagster/storage /lakehouse /home/dagster/.ivy2.5.2 \
    && chown -R 185:185 /opt/dagster /lakehouse /home/dagster \
    && python -c "import streaming_pipeline.definitions, dagster_postgres"

ENV DAGSTER_HOME=/opt/dagster/home \
    LAKEHOUSE_DIR=/lakehouse \
    STREAMING_PIPELINE_SCHEMA_DIR=/opt/streaming-pipeline/schemas \
    STREAMING_PIPELINE_SPARK_CONF_DIR=/opt/streaming-pipeline/spark_conf

USER 185:185
EXPOSE 3000
CMD ["dagster-webserver", "-h", "0.0.0.0", "-p", "3000", "-w", "workspace.yaml"]
