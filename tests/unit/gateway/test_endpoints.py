"""The endpoint file: entries (and their names) validated one by one, a bad entry reported beside the good ones and
kept as written, changes under the file's lock with atomic writes."""

import json
import multiprocessing
import threading

import pytest

from services.common.errors import ConfigurationError
from services.common.names import NAME_PATTERN
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
    assert read.invalid == {
        "a": "field 'engine': engine 'tensorflow' is not one of triton, onnxruntime, custom, custom_async, sklearn, "
        "xgboost, lightgbm"
    }


@pytest.mark.parametrize("text", ["{ not json", "[1, 2]", '{"endpoints": [1]}'])
def test_a_file_that_is_not_an_endpoint_object_is_a_configuration_error_naming_it(tmp_path, text):
    path = tmp_path / "endpoints.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=str(path)):
        EndpointsFile.read(path)


@pytest.mark.parametrize("name", ["..", "a/b", "a\nb", "Upper", "-x", "x" * 64, "a..b", "a\x00b"])
def test_an_entry_with_a_bad_name_is_reported_and_the_others_are_served(tmp_path, name):
    path = tmp_path / "endpoints.json"
    path.write_text(json.dumps({"endpoints": {name: {"engine": "custom"}, "ok": {"engine": "custom"}}}))
    read = EndpointsFile.read(path)
    assert list(read.endpoints) == ["ok"]
    [(where, problem)] = read.invalid.items()
    assert where.isprintable() and len(where) < 80 and NAME_PATTERN in problem


def test_a_change_keeps_the_invalid_entries_it_did_not_touch(tmp_path):
    """Before: any command's write dropped the entries that did not validate (a typo a person was fixing)."""
    path = tmp_path / "endpoints.json"
    path.write_text(
        '{"endpoints": {"typo": {"engine": "tensorflow"}, "Bad Name": {}}, "metrics": {"m": {"log_frequency": 5}}}'
    )
    EndpointsFile.update(path, lambda f: f.endpoints.setdefault("new", EndpointConfig(engine="custom")))
    raw = json.loads(path.read_text())
    assert raw["endpoints"] == {"new": {"engine": "custom"}, "typo": {"engine": "tensorflow"}, "Bad Name": {}}
    assert raw["metrics"] == {"m": {"log_frequency": 5}}
    assert EndpointsFile.update(path, lambda f: f.remove("endpoints", "Bad Name"))
    assert "Bad Name" not in json.loads(path.read_text())["endpoints"]


def test_a_triton_model_name_follows_the_same_rule():
    with pytest.raises(ValueError, match="Triton model name"):
        EndpointConfig(engine="triton", model="../etc")
    assert EndpointConfig(engine="onnxruntime", model="../build/model").model == "../build/model"  # a directory


def _add(path, name: str) -> None:
    EndpointsFile.update(path, lambda f: f.endpoints.setdefault(name, EndpointConfig(engine="custom")))


def test_writers_in_threads_and_processes_lose_nothing_and_readers_never_see_half_a_file(tmp_path):
    """As the deployment state's test: 20 writer threads and 4 writer processes (10 changes each) against 4 reader
    threads reading without the lock."""
    path = tmp_path / "endpoints.json"
    reads, bad, stop = [0], [], threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                EndpointsFile.read(path)
                reads[0] += 1
            except ConfigurationError as exc:
                bad.append(str(exc))

    def process_writer(index: int) -> None:
        for i in range(10):
            _add(path, f"p{index}-{i}")

    readers = [threading.Thread(target=reader) for _ in range(4)]
    writers = [threading.Thread(target=_add, args=(path, f"t{i}")) for i in range(20)]
    processes = [multiprocessing.get_context("fork").Process(target=process_writer, args=(i,)) for i in range(4)]
    for worker in readers + writers + processes:
        worker.start()
    for worker in writers + processes:
        worker.join()
    stop.set()
    for worker in readers:
        worker.join()
    found = EndpointsFile.read(path).endpoints
    print(f"\n{len(found)} of 60 entries kept, {reads[0]} reads, {len(bad)} invalid reads")
    assert len(found) == 60 and not bad and reads[0] > 0
    assert not list(tmp_path.glob("*.tmp"))
