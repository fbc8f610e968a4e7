# The MLflow tracking server and model registry of the production templates: PostgreSQL backend store, artifacts in
# S3 (MinIO), served through the server (`--serve-artifacts`) so that clients need no S3 credentials.
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir ".[registry-server]"

FROM python:3.11.11-slim-bookworm
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin mlflow
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
USER 10001
EXPOSE 5000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=2).status != 200)"]
CMD ["mlflow", "server", "--host", "0.0.0.0", "--port", "5000"]
