"""`python -m observability.dashboards`: rewrite the saved dashboard JSON from the code."""

from __future__ import annotations

from observability.dashboards import OUT, render

if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
