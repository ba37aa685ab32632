"""The web page's edges: days at the ends of the calendar, what a page must not keep or show, and
every address a browser may reach answered with a page (TestClient over a real store, lexical only)."""

from __future__ import annotations

from datetime import date
from typing import Iterator

import pytest
from fastapi.testclient import TestClient

from engine.api import ConversationEngine
from engine.config import Settings
from engine.surfaces.http.app import create_app
from engine.surfaces.web.views import month_step
from tests.web_support import SAMPLE, TOKEN

BROWSER = {"accept": "text/html,application/xhtml+xml"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(api_token=TOKEN, embedding_backend="none")
    with ConversationEngine(tmp_path_factory.mktemp("web-edges") / "home", settings=settings, embedder=None) as e:
        e.import_file(SAMPLE, fmt="jsonl")
        logged = TestClient(create_app(e), follow_redirects=False)
        assert logged.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 303
        yield logged


@pytest.mark.parametrize("query", ["day=0001-01-01", "day=9999-12-31", "day=1969-12-31"])
def test_a_day_out_of_range_says_which_days_work(client: TestClient, query: str) -> None:
    response = client.get(f"/?user=alice&{query}", headers=BROWSER)
    assert response.status_code == 422 and "out of range" in response.text and "1970-01-01" in response.text
    assert 'href="/?user=alice">Back to today' in response.text  # the error page keeps the user


@pytest.mark.parametrize("month", ["0001-01", "9999-12", "1969-12"])
def test_a_month_out_of_range_shows_the_days_month(client: TestClient, month: str) -> None:
    page = client.get(f"/?user=alice&day=2024-03-06&month={month}").text
    assert "March 2024" in page


def test_the_calendar_has_no_arrow_past_its_ends(client: TestClient) -> None:
    first = client.get("/?user=alice&day=1970-01-15").text
    last = client.get("/?user=alice&day=9998-12-31").text
    assert 'aria-label="Previous month"' not in first and 'aria-label="Next month"' in first
    assert 'aria-label="Next month"' not in last and 'aria-label="Previous month"' in last
    assert month_step(date(2024, 12, 1), 1) == date(2025, 1, 1) and month_step(date(2024, 1, 1), -1) == date(2023, 12, 1)


def test_pages_are_not_kept_by_the_browser(client: TestClient) -> None:
    for path in ("/?user=alice", "/search?user=alice&q=order", "/threads", "/settings"):
        assert client.get(path).headers["cache-control"] == "no-store", path


def test_a_notice_in_the_url_is_not_shown(client: TestClient) -> None:
    page = client.get("/?user=alice&notice=Your+session+expired,+log+in+at+evil.example").text
    assert "evil.example" not in page


@pytest.mark.parametrize("path,page", [("/compose", "/"), ("/regenerate", "/"), ("/settings/index", "/settings"),
                                       ("/logout", "/")])
def test_a_forms_address_opened_by_itself_goes_to_its_page(client: TestClient, path: str, page: str) -> None:
    response = client.get(f"{path}?user=alice")
    assert response.status_code == 303 and response.headers["location"].split("?")[0] == page


def test_an_unknown_path_is_a_page_for_a_browser_and_json_for_the_api(tmp_path) -> None:
    with ConversationEngine(tmp_path / "home", settings=Settings(embedding_backend="none"), embedder=None) as e:
        open_client = TestClient(create_app(e), follow_redirects=False, base_url="http://127.0.0.1")
        page = open_client.get("/no-such-page", headers=BROWSER)
        assert page.status_code == 404 and "There is no page at /no-such-page" in page.text
        assert page.headers["content-type"].startswith("text/html")
        api = open_client.get("/api/no-such-route", headers=BROWSER)
        assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


def test_a_failure_inside_a_page_is_a_page(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = client.app.state.engine  # type: ignore[attr-defined]

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")
    monkeypatch.setattr(engine, "list_threads", broken)
    response = client.get("/threads?user=alice", headers=BROWSER)
    assert response.status_code == 500 and response.headers["content-type"].startswith("text/html")
    assert "Something went wrong on the server" in response.text and "disk on fire" not in response.text


def test_settings_never_show_a_secret() -> None:
    shown = Settings(api_token="admin-s3cret", user_tokens={"tok-a": "a", "tok-b": "b"},
                     llm_url="https://user:pa55@llm.example/v1", embedding_backend="none").shown()
    assert shown["api_token"] == "set" and shown["user_tokens"] == "2 set"
    assert shown["llm_url"] == "https://***@llm.example/v1"
    assert "s3cret" not in str(shown) and "tok-a" not in str(shown) and "pa55" not in str(shown)
