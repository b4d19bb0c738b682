# A local stand-in for prom/prometheus (scripts/local_base_images.sh): Debian's prometheus
# (2.42), which takes the command line docker-compose.yml gives it (config file, TSDB path,
# retention, listen address), and wget for compose's health check. Runs as nobody, with its
# TSDB in /prometheus, as the public image does.
ARG DEBIAN_IMAGE=localhost/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus /etc/prometheus \
    && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
