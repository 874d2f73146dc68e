# syntax=docker/dockerfile:1
# banlieue manager image: `docker build -t banlieue:dev .`
# Stage 1 builds a wheel of banlieue and installs it with its dependencies into a venv;
# stage 2 copies only that venv onto a clean slim base (no compilers, no pip, no sources).

# Base image pinned by digest (issue 23; `make check-base-image`). The digest is the linux/amd64
# manifest of python:3.11-slim-bookworm (Python 3.11.16, built 2026-08-25) as recorded by the
# Docker Official Images' own registry log, github.com/docker-library/repo-info
# repos/python/remote/3.11-slim-bookworm.md: identical in both versions of that record read here
# (their multi-platform index digests differ, fe556eaf... and 0bee7276..., so no index digest is
# pinned). Other platforms: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>,
# e.g. linux/arm64/v8 139fa455f4fbf058a7fb28e184196829365da3a2d2cb1abb3f4f4426d524dbe4 (same record).
# The development machines cannot pull images, so the pin was not verified by a pull here.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:2fc9207f64226cb05ac317cee0bab6fa55a9ea311ce5a086baddd4b4a83c2d3c

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
RUN python -m venv /opt/banlieue
# Dependencies first, from the hash-locked requirements.lock (`make lock`), so source edits do not
# invalidate this layer and every downloaded file must match a committed sha256.
COPY requirements.lock ./
RUN /opt/banlieue/bin/pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
# banlieue/testing (API-server double, simulators' helpers) is excluded by .dockerignore.
COPY banlieue ./banlieue
RUN /opt/banlieue/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/banlieue/bin/pip install --no-deps /wheels/banlieue-*.whl \
 && /opt/banlieue/bin/python -m compileall -q /opt/banlieue/lib \
 && /opt/banlieue/bin/pip uninstall -y pip setuptools wheel \
 && /opt/banlieue/bin/banlieue --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="banlieue" \
      org.opencontainers.image.description="Kubernetes VirtualMachine API and CAPI v1beta2 infrastructure provider for vSphere" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base image's own pip/setuptools are not needed at run time.
RUN python -m pip uninstall -y pip setuptools wheel >/dev/null 2>&1 || true \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/banlieue /opt/banlieue
# .pyc files are compiled in the build stage; the root filesystem is read-only at run time.
ENV PATH=/opt/banlieue/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 8443 8081
ENTRYPOINT ["banlieue"]
CMD ["manager"]
