# A local stand-in for python:3.11-slim, built from Debian's own packages
# (scripts/local_base_images.sh) where no image registry can be reached. Same contract as the
# public image: `python` and `pip` on PATH, Python's headers, pip free to install (a venv:
# Debian's own Python is externally managed, PEP 668), apt usable by the images built FROM it.
ARG DEBIAN_IMAGE=localhost/debian:bookworm
FROM ${DEBIAN_IMAGE}

ENV LANG=C.UTF-8 \
    PATH=/usr/local/python/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-dev python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /usr/local/python
CMD ["python3"]
