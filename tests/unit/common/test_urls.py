"""A URL as logs and messages show it: every password it carries hidden, everything else kept."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from services.common.urls import shown_url
from services.lifecycle.store.db import shown

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    "url, shown_as",
    [
        (f"postgresql+psycopg2://u:{SECRET}@db:5432/state", "postgresql+psycopg2://u:***@db:5432/state"),
        (f"postgresql+psycopg2://u@db/state?password={SECRET}", "postgresql+psycopg2://u@db/state?password=***"),
        (
            f"postgresql://u@db/s?sslmode=require&sslpassword={SECRET}&passfile=/run/pgpass",
            "postgresql://u@db/s?sslmode=require&sslpassword=***&passfile=/run/pgpass",
        ),
        (f"postgresql://u@db/s?PassWord={SECRET};x=1", "postgresql://u@db/s?PassWord=***;x=1"),
        (f"http://user:{SECRET}@mlflow:5000", "http://user:***@mlflow:5000"),
        (f"http://mlflow:5000/api?token={SECRET}#top", "http://mlflow:5000/api?token=***#top"),
        (f"postgresql+psycopg2//u:{SECRET}@db/s", "postgresql+psycopg2//u:***@db/s"),  # a typo: no parser takes it
        (f"postgresql:u:{SECRET}@db", "postgresql:***@db"),
        (f"postgresql://u:p@{SECRET}@db/s", "postgresql://u:***@db/s"),  # an unencoded '@' in the password
        (f"postgresql://u:p/?{SECRET}@db/s", "postgresql://u:***@db/s"),
        ("sqlite:////srv/run/lifecycle/state.db", "sqlite:////srv/run/lifecycle/state.db"),
        ("postgresql+psycopg2://?service=serving_state", "postgresql+psycopg2://?service=serving_state"),
        ("postgresql://u@db/s?application_name=a@b", "postgresql://u@db/s?application_name=a@b"),
    ],
)
def test_every_password_a_url_carries_is_hidden_and_the_rest_kept(url, shown_as):
    assert shown_url(url) == shown_as and SECRET not in shown_as


def test_the_state_stores_address_hides_the_query_password_sqlalchemy_keeps():
    """SQLAlchemy's `render_as_string(hide_password=True)` hides the userinfo only: before, `?password=` was in every
    log line and message that named the store."""
    url = make_url(f"postgresql+psycopg2://u@db:5432/state?password={SECRET}")
    assert SECRET in url.render_as_string(hide_password=True)
    assert shown(url) == "postgresql+psycopg2://u@db:5432/state?password=***"
