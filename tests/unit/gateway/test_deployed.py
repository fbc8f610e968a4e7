"""The deployment state's snapshot as the gateway serves it: versions still loading are known, so a request for
one is told to retry (503 + Retry-After) rather than that the endpoint or version does not exist."""

from __future__ import annotations

import pytest

from services.api.catalog import Catalog
from services.common.errors import NotFound, Unavailable
from services.gateway.deployed import VersionedEndpoint, build_deployed
from services.lifecycle.deployments import Deployments, EndpointState, VersionState
from tests.support.models import unit_model_dir
from tests.unit.api.fakes import Fixed


def never_located(endpoint, state, version):
    raise AssertionError(f"only live versions are opened, not {endpoint} {version}")


def test_an_endpoint_whose_versions_are_all_loading_is_known_as_loading():
    state = Deployments(
        endpoints={
            "coming": EndpointState(versions={"3": VersionState(version="3"), "2": VersionState(version="2")}),
            "refused": EndpointState(versions={"1": VersionState(version="1", state="rejected")}),
        }
    )
    deployed = build_deployed(state, triton=None, buckets=None, locate=never_located)
    assert deployed.by_name == {} and deployed.names() == []
    assert deployed.loading == {"coming": ("2", "3")}  # a rejected version is no version to wait for
    catalog = Catalog(None, [Fixed(deployed)])
    with pytest.raises(Unavailable, match=r"endpoint 'coming' is being loaded \(version 2, 3\)") as raised:
        catalog.resolve("coming")
    assert raised.value.retry_after and raised.value.status_code == 503
    with pytest.raises(NotFound, match="no endpoint 'refused'"):
        catalog.resolve("refused")


def test_a_live_endpoint_keeps_the_versions_it_is_loading(tmp_path):
    model_dir = unit_model_dir(tmp_path / "m")
    versions = {"1": VersionState(version="1", state="live"), "2": VersionState(version="2")}
    state = Deployments(endpoints={"emb": EndpointState(versions=versions)})
    deployed = build_deployed(state, triton=None, buckets=None, locate=lambda *_: model_dir)
    endpoint = deployed.by_name["emb"]
    assert isinstance(endpoint, VersionedEndpoint)
    assert endpoint.versions() == ["1"] and endpoint.loading == ("2",)
    assert endpoint.choose(None, None).version == "1"  # traffic stays on the live version meanwhile


def test_a_version_asked_for_while_it_loads_is_a_503_to_retry():
    endpoint = VersionedEndpoint("emb", {}, {}, loading=("4",))
    with pytest.raises(Unavailable, match=r"endpoint 'emb' is being loaded \(version 4\)") as raised:
        endpoint.choose("4", None)
    assert raised.value.retry_after and raised.value.status_code == 503
    with pytest.raises(NotFound, match="no live version '5'"):
        endpoint.choose("5", None)
