"""The built-in statistics of every prediction."""

from types import SimpleNamespace

import numpy as np
from prometheus_client import REGISTRY

from observability.tally import TALLY
from services.monitoring.builtin import record_prediction


def test_embedding_norms_are_each_row_s_l2_norm():
    model = SimpleNamespace(endpoint="unit-norms", version="1", manifest=SimpleNamespace(task="embedding"))
    outputs = np.array([[3.0, 4.0], [0.6, 0.8], [0.1, 0.2]], dtype=np.float32)
    record_prediction(model, outputs, [3, 4, 5], [False, False, True])
    TALLY.flush()
    labels = {"endpoint": "unit-norms", "version": "1"}
    assert REGISTRY.get_sample_value("serving_endpoint_embedding_norm_count", labels) == 3
    total = REGISTRY.get_sample_value("serving_endpoint_embedding_norm_sum", labels)
    expected = np.linalg.norm(outputs.astype(np.float64), axis=1)
    assert total == sum(expected.tolist()) and abs(total - (5.0 + 1.0 + 5**0.5 / 10)) < 1e-6
    assert REGISTRY.get_sample_value("serving_endpoint_embedding_norm_bucket", labels | {"le": "0.5"}) == 1
    assert REGISTRY.get_sample_value("serving_endpoint_truncated_texts_total", labels) == 1
