"""Build-time generator (mkdocs-gen-files) of the references that come from the code, never written by hand:

- `reference/cli/{serving,loadtest}.md`: Typer's own documentation of each console script (`typer MODULE utils
  docs`), so every command, option and default is the one the code declares;
- `reference/http-api/{gateway,fastapi}.json`: the OpenAPI document of each HTTP app, rendered into
  `reference/http-api/{gateway,fastapi}.md` by neoteroi's `[OAD(...)]` (no CDN, unlike Swagger UI).

Each comes from a fresh interpreter, run side by side: building an app configures logging (`setup_logging`), which
must not touch the logging of the MkDocs process that counts warnings for `--strict`. `SERVING_*` and `GATEWAY_*`
variables are dropped so the references show the defaults, not this machine's settings. Any failure fails the
build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import mkdocs_gen_files

CLIS = {"serving": "services.cli", "loadtest": "loadtest.cli"}
APPS = {
    "gateway": ("services.gateway.app", "the gateway (STACK=clearml), with the admin API and the lineage route"),
    "fastapi": ("services.fastapi_stack.app", "the FastAPI baseline (STACK=fastapi)"),
}
DUMP_OPENAPI = """
import json, sys
from fastapi import FastAPI
from {module} import create_app
app = create_app()
while not isinstance(app, FastAPI):  # the edge and the /serve door around the FastAPI app
    app = app.app
json.dump(app.openapi(), sys.stdout)
"""
ENV = {key: value for key, value in os.environ.items() if not key.startswith(("SERVING_", "GATEWAY_"))}


def output(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=ENV, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)[:80]} failed:\n{done.stderr}")
    return done.stdout


with ThreadPoolExecutor(4) as pool:
    clis = {
        name: pool.submit(output, "-m", "typer", module, "utils", "docs", "--name", name)
        for name, module in CLIS.items()
    }
    apps = {name: pool.submit(output, "-c", DUMP_OPENAPI.format(module=module)) for name, (module, _) in APPS.items()}

for name, future in clis.items():
    with mkdocs_gen_files.open(f"reference/cli/{name}.md", "w") as page:
        page.write(future.result())

for name, future in apps.items():
    with mkdocs_gen_files.open(f"reference/http-api/{name}.json", "w") as document:
        json.dump(json.loads(future.result()), document, indent=1)
    with mkdocs_gen_files.open(f"reference/http-api/{name}.md", "w") as page:
        page.write(
            f"# HTTP API: {name}\n\nThe HTTP API of {APPS[name][1]}, generated at build time from the app's OpenAPI "
            f"document ([{name}.json]({name}.json)). A running server serves the same document at `/openapi.json`, "
            "Swagger UI at `/docs` and ReDoc at `/redoc`.\n\n"
            f"[OAD({name}.json)]\n"
        )
