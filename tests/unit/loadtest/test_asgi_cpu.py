"""`loadtest/asgi_cpu.py`: the gateway app served in process answers every request 200 and says what each cost."""

import uvloop

from loadtest.asgi_cpu import measure
from tests.support.models import unit_model_dir


def test_the_gateway_app_in_process_reports_its_cpu_per_request(tmp_path):
    cpu, rate = uvloop.run(measure(unit_model_dir(tmp_path / "m"), requests=200, callers=8))
    assert 0 < cpu < 100_000 and rate > 0, (cpu, rate)
