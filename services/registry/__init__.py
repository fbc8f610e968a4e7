"""The model registry: MLflow (embedded SQLite store under the run directory by default, any tracking server via
MLFLOW_TRACKING_URI). Registering builds the checkpoint with the project's export, logs the artifacts and their
lineage to an MLflow run and registers a new version; the lifecycle controller reads versions and their lineage
back, and tags and promotes them. `train` is an example training pipeline that ends by registering what it trained."""
