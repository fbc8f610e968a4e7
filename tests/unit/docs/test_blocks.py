"""Docs that run, checked before any stack starts: every shell and Python block of README.md and docs/ is one the
e2e runner can run or is marked with why not; the README stays short and its links lead somewhere; the runner's
parsing and its JSON sample check do what the docs promise."""

import re
from pathlib import Path

from tests.support.docblocks import REPO, Block, blocks, plan, shell_script, stack_key
from tests.support.jsonsample import SampleParser, matches


def test_every_code_block_runs_or_is_marked_with_a_reason():
    runs, skipped, problems = plan()
    print(f"{len(runs)} blocks run in tests/e2e/test_docs.py, {len(skipped)} marked not run")
    assert problems == []
    assert len(runs) >= 20 and {stack_key(run.stack) for run in runs}


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if not target.startswith("http"):
            assert (REPO / target).is_file(), target


def test_unmarked_blocks_the_runner_cannot_run_are_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nmake up STACK=triton\n```\n\n"  # foreground
        "```bash\nkubectl apply -k deploy/k8s/overlays/gpu\n```\n\n"
        "<!-- not run: -->\n```bash\nmake bench\n```\n\n"
        "```\nno language\n```\n\n"
        "<!-- not run: needs a GPU -->\n\n```bash\nnvidia-smi\n```\n"
    )
    runs, skipped, problems = plan([page])
    assert len(problems) == 4, problems
    assert [b.not_run for b in skipped] == ["", "needs a GPU"]


def test_a_block_runs_against_the_stack_its_page_started_last(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\ncurl -s localhost:8080/health/ready\n```\n"
        "```bash\nmake up STACK=triton DETACH=1\ncurl -s localhost:8000/v2/health/ready\n```\n"
        "```python\nprint(1)  # 1\n```\n"
        "```bash\nmake down\n```\n"
        "```bash\ncurl -s localhost:8080/health/ready\n```\n"
    )
    runs, _, problems = plan([page])
    assert problems == []
    assert [run.stack for run in runs] == [
        "make up DETACH=1",
        "make up STACK=triton DETACH=1",
        "make up STACK=triton DETACH=1",
        "make up STACK=triton DETACH=1",
        "make up DETACH=1",
    ]
    assert runs[2].samples == ["1"] and "make up" not in runs[1].script


def test_commands_followed_by_a_json_sample_keep_their_output_and_heredocs_stay_whole():
    code = (
        "cat > f.py <<'EOF'\n# {not a sample}\nx = 1\nEOF\n"
        'curl -s localhost:8080/serve/minilm \\\n  -d \'{"text": "hi"}\'\n# {"tokens":3,...}\n'
    )
    script, samples = shell_script(code)
    assert samples == ['{"tokens":3,...}']
    assert 'DOCS_OUT/0"' in script and "# {not a sample}\nx = 1\nEOF" in script


def test_json_samples_match_by_shape_keys_and_shown_values():
    sample = SampleParser(
        '{"model":"m","embedding":[-0.0345,...],"tokens":4,"request_id":"3f2a...-1c","usage":{...}}'
    ).parse()
    real = {"model": "m", "embedding": [-0.034477253, 0.03], "tokens": 4, "request_id": "x-1", "usage": {"a": 1}}
    assert matches(sample, real) == []
    assert matches(sample, {**real, "tokens": 8}) == ["$.tokens: 8 here, 4 in the docs"]
    assert matches(sample, {**real, "extra": 1}) == ["$: keys not in the docs: ['extra']"]
    assert matches(sample, {k: v for k, v in real.items() if k != "usage"}) == ["$: no key 'usage'"]
    assert matches(SampleParser('{"a":1,...}').parse(), {"a": 1, "b": 2}) == []
    assert matches(SampleParser("[[...],[...]]").parse(), [[1], [2], [3]]) == ["$: 3 elements, the docs show 2"]


def test_a_marker_may_be_separated_from_its_fence_by_blank_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: Docker -->\n\n```bash\ndocker ps\n```\n  ```python\n  x = 1\n  ```\n")
    found: list[Block] = blocks(Path(page))
    assert [(b.lang, b.not_run, b.code) for b in found] == [
        ("bash", "Docker", "docker ps\n"),
        ("python", None, "x = 1\n"),
    ]


def test_a_curl_with_braces_in_its_url_needs_globbing_off(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- not run: needs Prometheus -->\n```bash\n"
        "curl -s 'localhost:9090/api/v1/query?query=serving_drift_score{method=\"psi\"}'\n```\n"
        "```bash\ncurl -sg 'localhost:9090/api/v1/query?query=x{a=\"b\"}'\n"
        'curl -s localhost:8080/serve/minilm -d \'{"text": "hi"}\'\n```\n'
    )
    problems = plan([page])[2]
    assert len(problems) == 1 and "curl needs -g" in problems[0], problems
