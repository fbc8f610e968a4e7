"""Shared fixtures and the test tiers.

Tiers follow the folders and get their marker from them: `tests/unit` (no servers, no model export: `make
test-unit`), `tests/checks` (the documentation build and the deploy tools: `make test-checks`), `tests/integration`
(real servers per stack), `tests/e2e` (the user's entry points as subprocesses).
A unit test that asks for an exported model fails at collection: that belongs to the integration tier.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.models import REAL_MODEL, export_tiny
from tests.support.postgres import postgres  # noqa: F401 - the session's PostgreSQL server, started when asked for
from tests.support.servers import Server, start_http_stack

TIERS = ("unit", "checks", "integration", "e2e")
WHOLE_PACKAGES = ("tests/integration/scaleout/",)
"""Packages with a package-scoped fixture (the fleet): `make test`'s processes take each whole, so it starts once."""
EXPORTED_MODEL_FIXTURES = {"tiny_model", "tiny_classifier", "real_model", "fastapi_server"}
SCOPE_SECONDS = json.loads((Path(__file__).parent / "scope_seconds.json").read_text())
"""Seconds each of the longer scopes (a file, or a package of `WHOLE_PACKAGES`) took in `make test`'s parallel part:
its processes take the longest first, so no long one starts last (pytest-xdist's own order is by number of tests,
which started the 86 s benchmark test last but 14). A scope missing or stale costs minutes, never a result."""


MLFLOW_URI = "MLFLOW_TRACKING_URI"
MLFLOW_URI_AT_START = os.environ.get(MLFLOW_URI)


def pytest_configure(config):
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """`mlflow.set_tracking_uri` (the registry adapter calls it in-process) also sets MLFLOW_TRACKING_URI in
    os.environ, so every process a later test starts (a controller, `serving train`) would use that test's store:
    each test starts from the environment the session started with."""
    if MLFLOW_URI_AT_START is None:
        os.environ.pop(MLFLOW_URI, None)
    else:
        os.environ[MLFLOW_URI] = MLFLOW_URI_AT_START


def pytest_addoption(parser):
    parser.addoption(
        "--serial",
        choices=("all", "skip", "only"),
        default="all",
        help="the tests marked `serial` (they measure rates and latencies under load): all with the rest, skip them, "
        "or only them; `make test` runs the rest in several processes, then these alone. Combines with -m.",
    )


def pytest_xdist_make_scheduler(config, log):
    """`make test` (`-n N --dist loadfile`): each process takes a test file at a time, so a module's servers start
    once, and a package of `WHOLE_PACKAGES` whole."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # the collection's order: longest scopes first (`SCOPE_SECONDS`)

    class FilesAndWholePackages(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return FilesAndWholePackages(config, log)


def pytest_configure_node(node):
    """pytest-xdist's processes collect on their own, and the scheduler takes their order: under `--dist loadfile`
    they put the longest scopes first."""
    node.workerinput["longest_first"] = node.config.getoption("dist") == "loadfile"


def scope_of(nodeid: str) -> str:
    """What one of `make test`'s processes takes whole: the test's file, or its package of `WHOLE_PACKAGES`."""
    path = nodeid.split("::", 1)[0]
    return next((package for package in WHOLE_PACKAGES if path.startswith(package)), path)


def pytest_collection_modifyitems(config, items):
    tests_dir = Path(__file__).parent
    for item in items:
        tier = Path(item.path).relative_to(tests_dir).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: tests live in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "unit" and EXPORTED_MODEL_FIXTURES & set(item.fixturenames):
            raise pytest.UsageError(f"{item.nodeid}: the unit tier exports no model; move it to tests/integration")
    serial = config.getoption("serial")
    if serial != "all":
        keep = [item for item in items if (item.get_closest_marker("serial") is not None) == (serial == "only")]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    if getattr(config, "workerinput", {}).get("longest_first"):  # a file's own order kept
        items.sort(key=lambda item: -SCOPE_SECONDS.get(scope_of(item.nodeid), 0))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer random BERT embedding model, exported to ONNX (checkpoint at <out>/../checkpoint)."""
    return export_tiny(tmp_path_factory.mktemp("tiny-embedding"), "embedding", "tiny-bert")


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory) -> Path:
    return export_tiny(tmp_path_factory.mktemp("tiny-classifier"), "classification", "tiny-classifier")


@pytest.fixture(scope="session")
def real_model() -> Path:
    """The real all-MiniLM-L6-v2 export made by `make model` (which `make test` runs first)."""
    from services.modelbuild.export import build

    build(REAL_MODEL)  # a no-op when up to date
    return REAL_MODEL


@pytest.fixture(scope="module")
def fastapi_server(tmp_path_factory, tiny_model) -> Iterator[Server]:
    """STACK=fastapi with two workers serving the tiny model."""
    server = start_http_stack(tmp_path_factory.mktemp("fastapi"), tiny_model, workers=2)
    yield server
    server.launcher.stop_all()
