"""What `serving model rollout --dry-run` and `serving model list` say about a rollout, checked against the lines the
docs show (docs/lifecycle.md, "How a step is judged")."""

from __future__ import annotations

from pathlib import Path

from services.lifecycle.deployments import Rollout
from services.lifecycle.rollouts.plan import plan, status

DOCS = (Path(__file__).parents[4] / "docs" / "lifecycle.md").read_text()


def docs_example(**fields) -> dict:
    policy = {"steps": [10, 50, 100], "dwell": 60, "max_error_rate": 0.01, "max_p99_ratio": 1.5}
    return Rollout(version="2", stable="1", **policy, **fields).model_dump()


def test_the_dry_run_of_the_docs_example_at_20_requests_a_second_is_the_one_the_docs_show():
    lines = plan(docs_example(), rate=20)
    assert "\n".join(lines) in DOCS
    assert lines[3].endswith("at 20 req/s it has its requests after about 100 s")


def test_the_dry_run_says_when_a_step_cannot_gather_its_requests_and_what_to_change():
    assert "no traffic measured now" in plan(docs_example(), rate=0)[3]
    slow = plan(docs_example(), rate=0.25)[3]
    assert "about 8000 s, more than the 660 s allowed: it would roll back unjudged" in slow
    assert "--max-wait, or lower --min-requests" in slow


def test_the_status_of_a_waiting_step_is_the_line_the_docs_show():
    waiting = "waiting for 200 requests on each version for the p99 comparison (version 2 has 27), up to 587 s more"
    line = f"sentiment: {status(docs_example(waiting=waiting))}"
    assert line in DOCS
    assert status(docs_example(step=1)) == "rollout of version 2: step 2 of 3 (50%), in its dwell of 60 s"
    ended = docs_example(status="rolled_back", outcome="rolled back at 10%: error rate 0.100 > 0.01")
    assert status(ended) == "rollout of version 2: rolled back: rolled back at 10%: error rate 0.100 > 0.01"
