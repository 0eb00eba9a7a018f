# One image for every rmq role (docker-compose.yml uses it for all of them):
#
#   docker build -t rmq:local .
#   docker run --rm -p 9876:9876 rmq:local rmq namesrv
#   docker run --rm -p 10911:10911 -v $PWD/conf/single:/etc/rmq:ro rmq:local \
#       rmq broker -c /etc/rmq/broker.conf -n <namesrv host>:9876
#
# Data lives under /home/rmq (store/ for a broker, namesrv/ for a NameServer's KV
# file): mount volumes there. The processes run as the unprivileged user rmq.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/rmq
COPY pyproject.toml README.md ./
COPY rmq ./rmq
COPY ha ./ha
COPY nameserver ./nameserver
COPY spark ./spark
RUN pip install . \
 && useradd --create-home --uid 10001 rmq \
 && mkdir -p /home/rmq/store /home/rmq/namesrv \
 && chown -R rmq:rmq /home/rmq

USER rmq
WORKDIR /home/rmq
# NameServer, broker, broker HA, Prometheus metrics
EXPOSE 9876 10911 10912 5557
CMD ["rmq", "--help"]
