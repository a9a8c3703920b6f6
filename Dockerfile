# callgate sidecar image. Build: `make image` (docker build -t callgate .).
# tests/e2e/test_image_entrypoint.py runs this file's CMD and HEALTHCHECK against a wheel
# installed into a fresh venv, so keep them JSON arrays that the test can parse.

# ---- builder: the callgate wheel and every dependency wheel --------------------------------
FROM python:3.11-slim-bookworm AS builder

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
COPY server/ server/
COPY client/ client/
COPY cli/ cli/
COPY proto/ proto/

RUN pip wheel --no-cache-dir --no-deps -w /wheels . \
 && pip wheel --no-cache-dir -w /wheels /wheels/callgate-*.whl

# ---- runtime ------------------------------------------------------------------------------
FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="callgate" \
      org.opencontainers.image.description="A gRPC service that executes AI-agent tool calls only after its policy gate approves them." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"

# bubblewrap: the Bash sandbox; libseccomp2: its seccomp filter; ripgrep: the Grep tool.
# DL3008: not version-pinned on purpose. Debian replaces point releases (security fixes) in
# place, so exact pins break rebuilds; the pinned base image tag fixes the Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap libseccomp2 ripgrep \
 && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/callgate \
    PATH=/opt/callgate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Only the wheels from the builder, never an index: what was built is what runs.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv /opt/callgate \
 && /opt/callgate/bin/pip install --no-cache-dir --no-index --find-links /wheels /wheels/callgate-*.whl

# A fixed non-root uid/gid so that a pod's runAsUser/fsGroup can match it.
RUN groupadd --gid 10001 callgate \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /state --shell /usr/sbin/nologin callgate \
 && mkdir -p /workspace /state /run/callgate \
 && chown 10001:10001 /workspace /state /run/callgate \
 && chmod 0700 /state

# /workspace: the files the agent works on (shared with the agent container).
# /state: tokens, journal, approvals in /state/callgate (keep it; it is the server's durable
# state). A subdirectory, because the server refuses a state directory it does not own and
# cannot make 0700, which is what a Kubernetes emptyDir or fsGroup volume root is (root-owned).
# /run/callgate: the Unix socket (shared with the agent container; socket mode 0660).
VOLUME ["/workspace", "/state", "/run/callgate"]

# Where `callgate health`, `tools`, `call`, `approvals` and the Python client connect, and
# where they find the generated tokens.
ENV CALLGATE_TARGET=unix:///run/callgate/callgate.sock \
    CALLGATE_STATE_DIR=/state/callgate

WORKDIR /workspace
USER 10001:10001

HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 \
  CMD ["callgate", "health", "--target", "unix:///run/callgate/callgate.sock"]

ENTRYPOINT ["callgate"]
CMD ["serve", "--listen", "unix:///run/callgate/callgate.sock", "--workspace", "/workspace", "--state-dir", "/state/callgate"]
