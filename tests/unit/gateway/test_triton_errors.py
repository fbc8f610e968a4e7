"""What a caller is told when Triton fails: the kind of failure and what to do, never Triton's address nor gRPC's
text (those go to the log)."""

import logging

import grpc
import pytest
from grpc.aio import AioRpcError, Metadata

from services.triton.grpc_client import TritonClient

DETAILS = "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.1.2.3:8001: Connection refused"


@pytest.mark.parametrize(("code", "status"), [(grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.INTERNAL, 500)])
def test_a_triton_failure_answers_without_its_address_or_grpc_text(code, status, caplog):
    client = TritonClient("10.1.2.3:8001", timeout=1, retry_after=1)
    with caplog.at_level(logging.WARNING):
        error = client._error(AioRpcError(code, Metadata(), Metadata(), details=DETAILS), "encoder")
    print(f"\n{code.name}: answered {error.message!r}")
    assert error.status_code == status
    assert "10.1.2.3" not in error.message and "Connection refused" not in error.message
    assert "10.1.2.3" in caplog.text or "Connection refused" in caplog.text, "the log keeps the details"
