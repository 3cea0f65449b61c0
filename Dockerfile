# syntax=docker/dockerfile:1.7
# One image for every process of the stack that runs our code: the Airflow components
# (api-server, scheduler, dag-processor, triggerer and the one-shot inits) and the Spark
# master and workers. Spark's Python workers import txn_broker (the Spark data source,
# segment upload) and must run the same Python and pyspark as the driver in the Airflow
# task, so the Spark nodes use this image rather than apache/spark (docs/deployment.md).
#
#   docker build -t txn-broker:local .
ARG AIRFLOW_BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_BASE_IMAGE}

USER root
# PySpark 4 needs a Java 17+ runtime. /usr/share/man/man1 is missing from slim Debian
# images and the JRE's post-install script fails without it. JAVA_HOME gets an
# architecture-independent path (amd64 and arm64 install under different names).
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /usr/lib/jvm/java-17 \
    && mkdir -p /opt/txn_broker /opt/airflow/auth /opt/airflow/spark_apps /opt/spark/work \
    && chown -R airflow:0 /opt/txn_broker /opt/airflow/auth /opt/airflow/spark_apps /opt/spark \
    && chmod -R g+rwX /opt/txn_broker /opt/airflow/auth /opt/airflow/spark_apps /opt/spark
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_WORKER_DIR=/opt/spark/work

USER airflow
WORKDIR /opt/txn_broker
# The project and its pinned dependency set. sql/ is packaged as txn_broker.sql, the
# Airflow layer plugins/txn_broker_airflow/ as txn_broker_airflow (the provider and its
# plugin, registered by entry points), and setuptools reads README.md for the package's
# long description.
COPY --chown=airflow:0 pyproject.toml constraints.txt README.md ./
COPY --chown=airflow:0 txn_broker/ txn_broker/
COPY --chown=airflow:0 sql/ sql/
COPY --chown=airflow:0 plugins/txn_broker_airflow/ plugins/txn_broker_airflow/
# apache-airflow is pinned by the [airflow] extra and by constraints.txt to the base
# image's version, so pip keeps the image's Airflow and only adds what we need.
RUN --mount=type=cache,target=/tmp/.cache/pip,uid=50000,gid=0 \
    pip install -c constraints.txt ".[airflow,spark]" \
    && python -c "import txn_broker, txn_broker.sql, txn_broker_airflow.provider_info, pyspark; print('txn_broker', pyspark.__version__)" \
    && txn-broker --help >/dev/null

COPY --chown=airflow:0 docker/airflow/ /opt/txn_broker/docker/airflow/

# Back to the base image's AIRFLOW_HOME; dags/, plugins/ and spark_apps/ are mounted
# there by docker-compose.yml (bake them in with COPY for Kubernetes).
WORKDIR /opt/airflow
