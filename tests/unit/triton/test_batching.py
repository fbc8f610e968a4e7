import numpy as np
import pytest

from services.triton.batching import decode_texts, merge_padded, split_rows


def test_merge_pads_requests_of_different_lengths_and_split_undoes_it():
    a = {"input_ids": np.array([[1, 2, 3]]), "attention_mask": np.array([[1, 1, 1]])}
    b = {"input_ids": np.array([[4, 5], [6, 7]]), "attention_mask": np.array([[1, 1], [1, 1]])}
    merged, rows = merge_padded([a, b])
    assert rows == [1, 2]
    assert merged["input_ids"].tolist() == [[1, 2, 3], [4, 5, 0], [6, 7, 0]]
    assert merged["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0]]
    assert merged["input_ids"].dtype == a["input_ids"].dtype
    parts = split_rows(np.arange(6).reshape(3, 2), rows)
    assert [p.tolist() for p in parts] == [[[0, 1]], [[2, 3], [4, 5]]]


def test_merge_uses_the_pad_value_given():
    merged, _ = merge_padded([{"x": np.array([[9]])}, {"x": np.array([[1, 2]])}], pad_values={"x": -1})
    assert merged["x"].tolist() == [[9, -1], [1, 2]]


def test_decode_texts_handles_both_layouts_and_rejects_bad_utf8():
    assert decode_texts(np.array([[b"a"], [b"b"]], dtype=object)) == ["a", "b"]
    assert decode_texts(np.array([b"\xc3\xa9"], dtype=object)) == ["é"]
    with pytest.raises(UnicodeDecodeError):
        decode_texts(np.array([[b"\xff"]], dtype=object))
