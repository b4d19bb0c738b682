# A local stand-in for redis:7.4-alpine (scripts/local_base_images.sh): Debian's redis-server
# (7.0), which takes what docker-compose.yml gives it (config on stdin, --appendonly, /data)
# and ships redis-cli for the health check.
ARG DEBIAN_IMAGE=localhost/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data
WORKDIR /data
CMD ["redis-server"]
