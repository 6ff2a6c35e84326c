# The project image of docker-compose.yml: the package (installed from its wheel), a JRE and the project's Spark
# jars. It runs the Spark Connect server (the Spark driver; its foreachBatch Python workers import the project)
# and the Dagster webserver and daemon (Spark Connect clients).
# bookworm, not the default slim base: Debian 13 (trixie) has no openjdk-17 package.

# ---- The wheel, built from the context as a deployment would (the Avro schemas and Spark profiles are package
# data: streaming_pipeline/lakehouse/schema_files -> ../../schemas and spark_profiles -> ../../spark_conf, symlinks
# that COPY keeps and the build follows). Also the wheel's base requirements, for the dependency layer below.
FROM python:3.11-slim-bookworm AS wheel

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /dist . \
    && python -c "import email.parser, glob, zipfile; \
wheel = zipfile.ZipFile(glob.glob('/dist/*.whl')[0]); \
name = next(n for n in wheel.namelist() if n.endswith('.dist-info/METADATA')); \
meta = email.parser.Parser().parsestr(wheel.read(name).decode()); \
print('\n'.join(r for r in meta.get_all('Requires-Dist') if 'extra ==' not in r))" > /dist/requirements.txt \
    && cat /dist/requirements.txt

# ---- The image.
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

# Dependencies first, at the exact versions of constraints.txt: this layer is rebuilt only when the wheel's
# requirements or the pins change, not when the code does. The base requirements (the pipeline and the Dagster
# code location, dagster-postgres for the compose instance) plus dagster-webserver for the dagster-webserver
# service; not the `stack` extra (embedded servers, demo, bench) nor `dev`.
COPY constraints.txt ./
COPY --from=wheel /dist/requirements.txt ./requirements.txt
RUN pip install -r requirements.txt dagster-webserver -c constraints.txt

# The package itself, from its wheel (same constraints: nothing changes if the layer above is current).
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install /tmp/dist/*.whl dagster-webserver -c constraints.txt \
    && rm -rf /tmp/dist \
    && pip check

ENV DAGSTER_HOME=/opt/dagster/home \
    LAKEHOUSE_DIR=/lakehouse \
    STREAMING_PIPELINE_CACHE_DIR=/opt/streaming-pipeline/cache

# The broker's and the engine's Java artifacts, resolved now (Apache Ivy from pyspark's jars/, Maven Central) into
# the image's cache (a lakehouse on S3 adds `s3a`, about 690 MB), so that nothing resolves when a container
# starts and the containers need no Maven access.
# Only the retrieved jars (jars/<set>/lib, listed by classpath.txt) are used: Ivy's download cache goes.
# The cache stays root-owned and read-only for uid 185.
RUN streaming-pipeline jars fetch kafka spark \
    && rm -rf "$STREAMING_PIPELINE_CACHE_DIR/jars/ivy-cache" "$STREAMING_PIPELINE_CACHE_DIR/jars/ivy-home" \
    && streaming-pipeline jars path spark | tr ':' '\n' | xargs ls -l

COPY workspace.yaml ./
COPY docker/dagster.yaml /opt/dagster/home/dagster.yaml
COPY docker/start-spark-connect.sh docker/spark-connect-log4j2.properties ./docker/

RUN chmod 0755 docker/start-spark-connect.sh \
    && bash -n docker/start-spark-connect.sh \
    && mkdir -p /opt/dagster/storage /lakehouse \
    && chown -R 185:185 /opt/dagster /lakehouse /home/dagster \
    && python -c "import streaming_pipeline.definitions, dagster_postgres, dagster_webserver; \
import streaming_pipeline, sysconfig; \
assert streaming_pipeline.__file__.startswith(sysconfig.get_paths()['purelib']), streaming_pipeline.__file__"

USER 185:185
# 3000: Dagster webserver; 15002: Spark Connect (gRPC); 4040: the Spark driver's UI.
EXPOSE 3000 15002 4040
CMD ["dagster-webserver", "-h", "0.0.0.0", "-p", "3000", "-w", "workspace.yaml"]
