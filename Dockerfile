# syntax=docker/dockerfile:1.7
# One image, two entrypoints: `eventedpleg operator` (the Deployment, uid 65532, the default here) and
# `eventedpleg agent` (the DaemonSet, which runs it as root, privileged; see the chart).
#
#   docker build -t evented-pleg-operator:0.1.0 .
#
# The agent reaches the host through `nsenter -t 1` (util-linux, part of every Debian base image) and the
# host's / mounted at /host, so the image itself needs no systemd, journalctl or kubelet tools.

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: the project's wheel plus the wheels of its dependencies --------------------------------------
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
# Exactly what the wheel is built from (pyproject.toml: the operator/eventedpleg package; templates/, crds/ and
# the chart force-included; README.md as the long description). .dockerignore keeps everything else out of the
# context, the lab (operator/eventedpleg_lab, its own distribution) included.
COPY pyproject.toml README.md ./
COPY operator/eventedpleg/ operator/eventedpleg/
COPY templates/ templates/
COPY crds/ crds/
COPY manifests/evented-pleg-operator/ manifests/evented-pleg-operator/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="evented-pleg-operator" \
      org.opencontainers.image.description="Turns on the kubelet's event-based PLEG (EventedPLEG) safely, node by node: operator and node agent." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/eventedpleg/evented-pleg-operator"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Install from the builder's wheels only (no index, no compiler here), then drop the installers: nothing in
# the final image can fetch or build code. The wheels are bind-mounted, so they leave no layer behind.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "evented-pleg-operator==${VERSION}" \
    && pip uninstall --yes pip setuptools wheel \
    && eventedpleg --version
# The operator's user; the chart's agent DaemonSet overrides it to root.
USER 65532:65532
# Kubernetes ignores the image HEALTHCHECK: the chart's liveness/readiness probes (/healthz on the metrics
# port) are what count, and the agent has no endpoint to check.
HEALTHCHECK NONE
ENTRYPOINT ["eventedpleg"]
CMD ["operator"]
