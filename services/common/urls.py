"""A URL as a log line or a message may show it: without the passwords it may carry.

Database and registry URLs come from the environment (`SERVING_STATE_URL`, `MLFLOW_TRACKING_URI`) and may hold a
password twice over: in the userinfo (`postgresql://user:PASSWORD@host/db`) and as a query parameter libpq reads
(`?password=PASSWORD`, `?sslpassword=...`). Both are replaced by `***` (SQLAlchemy's own mark), on the text as given,
so a URL no parser takes (a typo in the scheme) is shown without its password too.
"""

from __future__ import annotations

import re

HIDDEN = "***"
_USERINFO = re.compile(r"^(?P<head>[^/?#]*//[^:@/?#]*):.*@")
"""`scheme://user:password@`: everything between the user's ':' and the last '@', so that a password holding an
unencoded '@', '/' or '?' is hidden whole (a query value with an '@' is hidden with it)."""
_BARE_USERINFO = re.compile(r"^(?P<head>[^:@/?#]*):.*@")
"""The same in a text without `//` (a typo such as `postgresql:user:password@host`)."""
_SECRET_PARAMETER = re.compile(
    r"(?P<key>[?&;][^=&;#]*(?:passw|pwd|secret|token|credential)[^=&;#]*=)[^&;#]*", re.IGNORECASE
)
"""A query parameter whose name says it holds a secret (`password`, `sslpassword`, `passwd`, `token`, ...); libpq's
`passfile` is a path and stays."""


def shown_url(url: str) -> str:
    """`url` with every password it carries (userinfo, secret query parameters) replaced by `***`."""
    text = str(url)
    userinfo = _USERINFO if "//" in text else _BARE_USERINFO
    hidden = userinfo.sub(lambda m: f"{m['head']}:{HIDDEN}@", text, count=1)
    return _SECRET_PARAMETER.sub(lambda m: m["key"] + HIDDEN, hidden)
