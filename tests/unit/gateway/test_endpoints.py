"""The endpoint file: entries validated one by one, a bad entry reported beside the good ones, atomic writes."""

import json

import pytest

from services.common.errors import ConfigurationError
from services.gateway.endpoints import EndpointConfig, EndpointsFile


def test_missing_file_is_no_endpoints_and_write_is_atomic(tmp_path):
    path = tmp_path / "endpoints.json"
    assert EndpointsFile.read(path).endpoints == {}
    EndpointsFile(endpoints={"a": EndpointConfig(engine="custom")}).write(path)
    assert json.loads(path.read_text())["endpoints"] == {"a": {"engine": "custom"}}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_bad_entry_is_reported_and_the_others_are_kept(tmp_path):
    path = tmp_path / "endpoints.json"
    path.write_text('{"endpoints": {"a": {"engine": "tensorflow"}, "b": {"engine": "custom"}}}')
    read = EndpointsFile.read(path)
    assert list(read.endpoints) == ["b"]
    assert read.invalid == {"a": "field 'engine': Input should be 'triton', 'onnxruntime' or 'custom'"}


@pytest.mark.parametrize("text", ["{ not json", "[1, 2]", '{"endpoints": [1]}'])
def test_a_file_that_is_not_an_endpoint_object_is_a_configuration_error_naming_it(tmp_path, text):
    path = tmp_path / "endpoints.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=str(path)):
        EndpointsFile.read(path)
