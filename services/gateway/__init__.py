"""STACK=clearml: the ClearML Serving design. gunicorn runs N uvicorn workers; each tokenizes (the preprocessing)
and sends tensors to Triton's `encoder` over gRPC, where dynamic batching groups requests from every worker."""
