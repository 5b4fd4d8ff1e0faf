# syntax=docker/dockerfile:1.7
# One image, two entrypoints: `eventedpleg operator` (the Deployment, uid 65532, the default here) and
# `eventedpleg agent` (the DaemonSet, which runs it as root, privileged; see the chart).
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t evented-pleg-operator:0.1.0 .
#   eventedpleg lab image --platform linux/amd64 --platform linux/arm64
#                                  # the same build without a daemon (buildah), to an OCI archive
#
# Nothing here depends on the architecture: every apt package below has the same version on amd64 and
# arm64, and hack/constraints.txt holds the hashes of every platform's wheels.
#
# The base is Debian itself: bookworm's python3 in a virtualenv (PEP 668 forbids installing into the
# system Python). debian:bookworm-slim is made from the Debian archive; `eventedpleg lab image` makes the
# same image locally with mmdebstrap where no registry can be reached.
#
# The agent reaches the host through `nsenter -t 1` (util-linux, Essential in Debian, so in every Debian
# base image) and the host's / mounted at /host, so the image itself needs no systemd, journalctl or
# kubelet tools.

# Pinned by digest where it is pulled (a registry): the multi-arch index of Debian's own debian:bookworm-slim
# (made by debuerreotype from the Debian archive), bumped by Dependabot (.github/dependabot.yml). No registry
# was reachable where this digest was written down: it was copied from a public build log of that tag, so
# the release workflow's first pull is what confirms it (a wrong digest fails that pull, never silently).
# `eventedpleg lab image`, where no registry can be reached, passes
# --build-arg BASE_IMAGE=docker.io/library/debian:bookworm-slim and makes that image itself with mmdebstrap
# from the same suite and the same slim rules (eventedpleg_lab/image.py). The two stay equal where it
# matters: both are bookworm, and every package this file installs is pinned to the same version below;
# they can differ only in the base's security updates between the digest's day and the local build's.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim@sha256:3783cc01769c7b2b1b83a5c5ad96c815348e28ed7da68e2e3687004faa906251

# --- builder: the project's wheel plus the wheels of its pinned dependencies ----------------------------
FROM ${BASE_IMAGE} AS builder
# python3 and python3-venv are bookworm's metapackages, fixed for the release's life (the interpreter
# below them takes security updates); ca-certificates must follow the archive's trust store, never a pin.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 python3-venv=3.11.2-1+b1 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/build
WORKDIR /src
# Exactly what the wheel is built from (pyproject.toml: the operator/eventedpleg package; templates/, crds/ and
# the chart force-included; README.md as the long description) and the pins. .dockerignore keeps everything
# else out of the context, the lab (operator/eventedpleg_lab, its own distribution) included.
COPY pyproject.toml README.md LICENSE ./
COPY hack/constraints.txt hack/constraints.txt
COPY operator/eventedpleg/ operator/eventedpleg/
COPY templates/ templates/
COPY crds/ crds/
COPY manifests/evented-pleg-operator/ manifests/evented-pleg-operator/
# A build that must trust extra CAs passes its bundle as the secret pip-ca (`eventedpleg lab image` does):
# a mount for this RUN only, so no bundle, not even an empty mount point, reaches a layer.
# Every file fetched is checked against hack/constraints.txt's hashes (--require-hashes) and is a wheel
# (--only-binary: nothing is built from a fetched source); then the project's own wheel is built offline
# with the hatchling that came from those wheels.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && /opt/build/bin/pip wheel --no-cache-dir --disable-pip-version-check --require-hashes --no-deps \
        --only-binary=:all: -r hack/constraints.txt --wheel-dir /wheels \
    && /opt/build/bin/pip install --no-cache-dir --disable-pip-version-check --no-index --find-links=/wheels \
        hatchling \
    && /opt/build/bin/pip wheel --no-cache-dir --disable-pip-version-check --no-index --no-deps \
        --no-build-isolation --wheel-dir /wheels .

# --- runtime ---------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
# LICENSE reaches the image inside the wheel (its .dist-info/licenses). VERSION is pyproject.toml's (eventedpleg_lab.release keeps this default equal); REVISION (the commit) and
# CREATED (its commit time, RFC 3339, so a rebuild of one commit is labelled alike) come from the build:
# hack/release.sh and the release workflow pass both. BASE_IMAGE names the base; where it is made locally
# with mmdebstrap (`eventedpleg lab image`, hack/release.sh), BASE_ID is its image id and BASE_PACKAGES the
# sha256 of its package set (every `name:arch=version`, the release's *.base-packages file): what pins it.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG BASE_IMAGE
ARG BASE_ID=unknown
ARG BASE_PACKAGES=unknown
LABEL org.opencontainers.image.title="evented-pleg-operator" \
      org.opencontainers.image.description="Turns on the kubelet's event-based PLEG (EventedPLEG) safely, node by node: operator and node agent." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      io.eventedpleg.base.id="${BASE_ID}" \
      io.eventedpleg.base.packages="${BASE_PACKAGES}" \
      org.opencontainers.image.source="https://github.com/eventedpleg/evented-pleg-operator"
# EVENTEDPLEG_REVISION: the commit, for the operator's and the agent's eventedpleg_build_info metric.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    EVENTEDPLEG_REVISION="${REVISION}"
# Install from the builder's wheels only (no index, no compiler here), then drop every installer in the
# same layer: pip and setuptools from the venv, and python3-venv with the pip/setuptools wheels it brings
# from the system. Nothing in the final image can fetch or build code. The wheels are bind-mounted, so they
# leave no layer behind.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 python3-venv=3.11.2-1+b1 \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-index --find-links=/wheels \
        "evented-pleg-operator==${VERSION}" \
    && /opt/venv/bin/pip uninstall --yes --disable-pip-version-check pip setuptools \
    && apt-get purge -y --auto-remove python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl \
    && rm -rf /var/lib/apt/lists/* \
    && echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >> /etc/passwd \
    && echo "nonroot:x:65532:" >> /etc/group \
    && eventedpleg --version
# The operator's user, named in /etc/passwd: libraries that ask who they run as (getpass.getuser(),
# which kopf calls) fail for a uid without an entry. The chart's agent DaemonSet overrides it to root.
USER 65532:65532
# Kubernetes ignores the image HEALTHCHECK: the chart's liveness/readiness probes (/healthz on the metrics
# port) are what count, and the agent has no endpoint to check.
HEALTHCHECK NONE
ENTRYPOINT ["eventedpleg"]
CMD ["operator"]
