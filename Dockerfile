# The gpufleet image: one image for the scheduler (Deployment) and the node agent (DaemonSet).
#   docker build -t ghcr.io/gpufleet/gpufleet:0.1.0 .
# Runtime dependencies only (no [dev] extras), pinned by constraints.txt. It runs as the
# non-root user 65532, the UID deploy/scheduler/deployment.yaml sets; the agent's DaemonSet
# overrides it with root for the kubelet's device-plugin directory. tests/deploy checks
# that the UID and the entrypoint agree with the manifests.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/gpufleet
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN /opt/gpufleet/bin/pip install -c constraints.txt .

FROM python:3.11-slim
RUN groupadd --system --gid 65532 gpufleet \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpufleet
COPY --from=build /opt/gpufleet /opt/gpufleet
# The root filesystem is read-only in the cluster: no .pyc files, matplotlib's cache in /tmp
# (an emptyDir there).
ENV PATH=/opt/gpufleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
ENTRYPOINT ["gpufleet"]
CMD ["--help"]
