"""`serving model list` names, under its table, what a variant version was made from and how close it measured."""

from __future__ import annotations

from services.commands.lifecycle.listing import variant_line


def test_a_variant_version_says_its_source_and_figures():
    version = {
        "version": "2",
        "variant": {
            "variant": "int8",
            "source": {"name": "sentiment", "version": "1", "url": "http://ui/#/models/sentiment/versions/1"},
            "quality": {"mean_cosine": 0.99461, "topk_agreement": 0.9078, "accuracy": 0.9875},
            "passed": True,
        },
    }
    assert variant_line(version) == (
        "version 2 is the int8 variant of version 1: mean cosine 0.9946, top-10 agreement 0.9078, accuracy 0.9875; "
        "passed its quality gate"
    )


def test_an_overridden_variant_says_so_and_any_other_version_says_nothing():
    overridden = {"version": "3", "variant": {"variant": "int8", "source": None, "quality": {}, "passed": False}}
    assert variant_line(overridden) == (
        "version 3 is the int8 variant of a local build: no quality figures recorded; "
        "BELOW its quality gate (overridden)"
    )
    assert variant_line({"version": "1", "registry": {"name": "sentiment"}}) is None
