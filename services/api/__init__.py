"""The serving HTTP API shared by the FastAPI stack and the gateway: the edges (`serve_route`, `routes`, `v2`) translate
their protocol, the data plane (`dataplane`) serves; `paths` is the route table."""
