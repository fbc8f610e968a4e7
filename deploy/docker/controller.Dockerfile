# The lifecycle controller: watches the MLflow registry, deploys new versions into Triton's repository, runs
# rollouts (services/controller/). The `registry` role: the serving code plus the MLflow client.
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY services services
COPY observability observability
COPY model_repository model_repository
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir ".[registry]"

FROM python:3.11.11-slim-bookworm
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin serving
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    CONTROLLER_LOG_JSON=true \
    MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false
USER 10001
HEALTHCHECK --interval=30s --timeout=3s --retries=3 CMD ["python", "-c", "import os; os.kill(1, 0)"]
CMD ["python", "-m", "services.controller"]
