"""The serving HTTP API shared by the FastAPI stack and the gateway: routes translate, the data plane decides."""
