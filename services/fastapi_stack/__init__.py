"""STACK=fastapi, the baseline: tokenizer + ONNX Runtime inside each gunicorn/uvicorn worker."""
