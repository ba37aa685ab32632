"""The web page's routes without a browser: FastAPI's TestClient over a real store (lexical only, fast).

The browser tests (test_web_browser.py) click through the same pages; these check each route's
answer, status and escaping, and every bad input, in well under a second each.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone
from typing import Iterator
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient

from engine.api import ConversationEngine
from engine.config import Settings
from engine.query.days import TimelineEntry
from engine.errors import InvalidInputError
from engine.surfaces.http.app import create_app
from engine.query.navigation_results import MessageView
from engine.surfaces.web.views import fold, highlight, markdown, pick_day, plain, sections
from tests.web_support import OPENAI, SAMPLE, TOKEN

DAY = date(2024, 3, 6)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    settings = Settings(api_token=TOKEN, embedding_backend="none")
    with ConversationEngine(tmp_path_factory.mktemp("web") / "home", settings=settings, embedder=None) as e:
        e.import_file(SAMPLE, fmt="jsonl")
        e.import_file(OPENAI, fmt="openai", user_id="alice")
        e.regenerate_day_summary("alice", DAY)
        yield e


@pytest.fixture(scope="module")
def anonymous(engine: ConversationEngine) -> TestClient:
    return TestClient(create_app(engine), follow_redirects=False)


@pytest.fixture(scope="module")
def client(engine: ConversationEngine) -> TestClient:
    logged = TestClient(create_app(engine), follow_redirects=False)
    assert logged.post("/login", data={"token": TOKEN, "next": "/"}).status_code == 303
    return logged


def messages_of(engine: ConversationEngine, user: str = "alice") -> int:
    return engine.stats(user)["messages"]


# Auth -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/", "/?user=alice&day=2024-03-06", "/search?q=x", "/threads", "/settings"])
def test_without_the_cookie_every_page_redirects_to_login(anonymous: TestClient, path: str) -> None:
    response = anonymous.get(path)
    assert response.status_code == 303 and response.headers["location"].startswith("/login?next=")


def test_a_form_posted_without_the_cookie_stores_nothing(anonymous: TestClient, engine: ConversationEngine) -> None:
    before = messages_of(engine)
    response = anonymous.post("/compose", data={"user": "alice", "content": "sneaky"})
    assert response.status_code == 303 and response.headers["location"].startswith("/login")
    assert messages_of(engine) == before


def test_login_sets_an_http_only_strict_cookie_and_goes_back(anonymous: TestClient) -> None:
    response = anonymous.post("/login", data={"token": TOKEN, "next": "/threads?user=bob"})
    assert response.status_code == 303 and response.headers["location"] == "/threads?user=bob"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    anonymous.cookies.clear()


@pytest.mark.parametrize("token,message", [("", "Type the token"), ("nope", "not valid")])
def test_a_wrong_or_empty_token_is_refused(anonymous: TestClient, token: str, message: str) -> None:
    response = anonymous.post("/login", data={"token": token})
    assert response.status_code == 401 and message in response.text and "set-cookie" not in response.headers


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example"])
def test_login_never_redirects_off_site(anonymous: TestClient, target: str) -> None:
    response = anonymous.post("/login", data={"token": TOKEN, "next": target})
    assert response.headers["location"] == "/"
    anonymous.cookies.clear()


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}])
def test_a_form_posted_from_another_site_is_refused(client: TestClient, engine: ConversationEngine,
                                                    headers: dict[str, str]) -> None:
    before = messages_of(engine)
    response = client.post("/compose", data={"user": "alice", "content": "from elsewhere"}, headers=headers)
    assert response.status_code == 403 and "another site" in response.text
    assert messages_of(engine) == before


def test_an_admin_picks_the_user_and_sees_only_theirs(client: TestClient) -> None:
    page = client.get("/?user=bob&day=2024-03-06").text
    assert '<option value="bob" selected>' in page and '<option value="alice"' in page
    assert "Kyoto" in page and "PostgreSQL" not in page and "alice-0" not in page


def test_the_cookie_does_not_open_the_api(client: TestClient) -> None:
    response = client.post("/api/conversation/search", json={"user_id": "alice", "query": "database"})
    assert response.status_code == 401
    ok = client.post("/api/conversation/search", json={"user_id": "alice", "query": "database"},
                     headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200


def test_without_a_token_configured_there_is_no_login(tmp_path) -> None:
    with ConversationEngine(tmp_path / "home", settings=Settings(embedding_backend="none"), embedder=None) as e:
        open_client = TestClient(create_app(e), follow_redirects=False, base_url="http://127.0.0.1")  # Host guard
        assert open_client.get("/login").headers["location"] == "/"
        page = open_client.get("/")
        assert page.status_code == 200 and "No users yet" in page.text and "Log out" not in page.text


def test_a_user_token_sees_its_own_user_only(tmp_path) -> None:
    settings = Settings(api_token=TOKEN, user_tokens={"bob-token": "bob"}, embedding_backend="none")
    with ConversationEngine(tmp_path / "home", settings=settings, embedder=None) as e:
        e.import_file(SAMPLE, fmt="jsonl")
        bobs = TestClient(create_app(e), follow_redirects=False)
        assert bobs.post("/login", data={"token": "bob-token", "next": "/"}).status_code == 303
        page = bobs.get("/?user=alice&day=2024-03-06").text  # asking for alice still shows bob
        assert "Kyoto" in page and "PostgreSQL" not in page and '<option value="alice"' not in page
        assert bobs.post("/compose", data={"user": "alice", "content": "not for alice"}).status_code in (303, 403)
        assert "not for alice" not in str(e.substring_search("alice", "not for alice"))
        settings_page = bobs.get("/settings").text  # another user's token never shows, nor the admin's
        assert "bob-token" not in settings_page and TOKEN not in settings_page and "1 set" in settings_page


# The day page -----------------------------------------------------------------------------------
def test_a_day_shows_summary_sections_and_folds_covered_messages(client: TestClient) -> None:
    page = client.get("/?user=alice&day=2024-03-06").text
    for title in ("Summary", "Goals", "Decisions", "Open loops", "Next steps"):
        assert f"<h3>{title}</h3>" in page
    assert "Older messages folded (14)" in page  # all 14 turns of the day, covered by its summary
    assert 'id="m-alice-0038"' in page and "Regenerate summary" in page
    assert page.count('class="has"') + page.count('class=" has') >= 7  # the calendar marks alice's days


def test_opening_a_message_highlights_it_and_unfolds_its_block(client: TestClient) -> None:
    page = client.get("/?user=alice&thread=alice:continuous&day=2024-03-06&open=alice-0038").text
    assert re.search(r'class="msg [^"]*highlighted"\s+id="m-alice-0038"', page)
    assert '<details class="folded" open>' in page
    assert re.search(r'class="active">Continuous</a>', page)  # the continuous thread, named or not


def test_tool_outputs_are_folded_to_their_head(client: TestClient) -> None:
    page = client.get("/?user=alice&day=2024-03-04").text
    tool = page[page.index("kind-tool"):]
    assert '<details class="fold-tool"' in tool[:1500] and "expand" in tool[:1500]


@pytest.mark.parametrize("day", ["2024-13-01", "yesterdayish", "2024-02-30", "<script>"])
def test_a_day_that_is_not_a_date_says_how_to_write_one(client: TestClient, day: str) -> None:
    response = client.get("/", params={"user": "alice", "day": day})
    assert response.status_code == 422 and "use a date like 2024-03-04" in response.text
    assert "<script>" not in response.text


def test_a_day_without_messages_is_an_empty_day(client: TestClient) -> None:
    response = client.get("/?user=alice&day=2020-01-01")
    assert response.status_code == 200 and "No messages on this day" in response.text
    assert "Regenerate summary" not in response.text


def test_an_unknown_user_is_a_page_not_a_crash(client: TestClient) -> None:
    response = client.get("/?user=mallory")
    assert response.status_code == 404 and "unknown user" in response.text


# Forms ------------------------------------------------------------------------------------------
def test_compose_appends_and_lands_on_the_message(client: TestClient, engine: ConversationEngine) -> None:
    before = messages_of(engine)
    response = client.post("/compose", data={"user": "alice", "content": "Web composer check: marmalade-42"})
    assert response.status_code == 303 and messages_of(engine) > before  # (+ a note if the last day closed)
    target = response.headers["location"]
    assert "#m-" in target and "open=" in target
    assert "marmalade-42" in client.get(target).text
    found = engine.search("alice", "marmalade-42", mode="lexical")
    assert found.results and "marmalade" in found.results[0].snippet


@pytest.mark.parametrize("form,message", [
    ({"content": ""}, "The message is empty"),
    ({"content": "  \n "}, "The message is empty"),
    ({"content": "y" * 20_001}, "at most 20,000"),
    ({"content": "hi", "role": "tool"}, "role must be one of"),
])
def test_compose_refuses_bad_messages_and_keeps_the_draft(client: TestClient, engine: ConversationEngine,
                                                         form: dict[str, str], message: str) -> None:
    before = messages_of(engine)
    response = client.post("/compose", data={"user": "alice", "day": "2024-03-06", **form})
    assert response.status_code == 422 and message in response.text
    assert f'aria-label="Message">{form["content"]}</textarea>' in response.text  # the whole draft
    assert messages_of(engine) == before


def test_compose_stores_a_browsers_line_breaks_as_the_api_does(client: TestClient, engine: ConversationEngine) -> None:
    lines = ["x" * 1_999] * 10  # 20,000 characters with LF line breaks, 20,009 as a browser sends them (CRLF)
    response = client.post("/compose", data={"user": "alice", "content": "\r\n".join(lines)})
    assert response.status_code == 303, response.text
    sent = engine.get("alice", message_id=response.headers["location"].rpartition("#m-")[2])
    assert isinstance(sent, MessageView) and sent.content == "\n".join(lines)


def test_html_in_a_message_is_escaped(client: TestClient) -> None:
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    location = client.post("/compose", data={"user": "alice", "content": hostile}).headers["location"]
    page = client.get(location).text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script>" not in page and "<img" not in page


def test_regenerate_writes_the_summary(client: TestClient, engine: ConversationEngine) -> None:
    response = client.post("/regenerate", data={"user": "alice", "day": "2024-03-09"})
    assert response.status_code == 303 and "Summary of 2024-03-09 regenerated." in client.get(response.headers["location"]).text
    timeline = engine.day_timeline("alice", date(2024, 3, 9))
    assert timeline.summary is not None and timeline.summary.message_count == 10


@pytest.mark.parametrize("day,message", [("2020-01-01", "has no messages"), ("03/09/2024", "is not a day")])
def test_regenerate_refuses_a_day_it_cannot_summarise(client: TestClient, day: str, message: str) -> None:
    response = client.post("/regenerate", data={"user": "alice", "day": day})
    assert response.status_code == 422 and message in response.text


# Search -----------------------------------------------------------------------------------------
def test_search_highlights_words_and_links_to_the_message(client: TestClient) -> None:
    page = client.get("/search", params={"user": "alice", "q": "order A-7731"}).text
    assert "<mark>A-7731</mark>" in page and "<mark>order</mark>" in page  # the id whole, as it was searched
    assert "#m-alice-0038" in page and "covered by summary" in page
    assert re.search(r"<th>lexical</th>", page)


def test_search_marks_the_searched_words_not_the_stop_words(client: TestClient) -> None:
    page = client.get("/search", params={"user": "alice", "q": "what did we decide about the database?"}).text
    marked = {m.lower() for m in re.findall(r"<mark>([^<]*)</mark>", page)}
    assert "database" in marked
    assert not marked & {"what", "did", "we", "about", "the"}


def test_search_scoped_to_a_day(client: TestClient) -> None:
    page = client.get("/search", params={"user": "alice", "q": "PostgreSQL", "scope": "day", "day": "2024-03-05"}).text
    days = set(re.findall(r"<span>(2024-\d\d-\d\d)</span>", page))
    assert days == {"2024-03-05"}, days


@pytest.mark.parametrize("params,message", [
    ({"q": ""}, "query is empty"),
    ({"q": "   "}, "query is empty"),
    ({"q": "x", "limit": "99"}, "limit must be a whole number from 1 to 20"),
    ({"q": "x", "limit": "abc"}, "limit must be"),
    ({"q": "x", "recency": "soon"}, "Recency must be a number of days"),
    ({"q": "x", "recency": "-3"}, "more than 0 and at most 36500"),
    ({"q": "x", "recency": "0"}, "more than 0 and at most 36500"),
    ({"q": "x", "recency": "nan"}, "Recency must be"),
    ({"q": "x", "limit": "\u00b2"}, "limit must be a whole number"),
    ({"q": "x", "scope": "galaxy"}, "scope must be"),
    ({"q": "x", "scope": "day", "day": "tomorrow-ish"}, "is not a day"),
    ({"q": "x" * 5000}, "query"),
])
def test_search_says_what_is_wrong(client: TestClient, params: dict[str, str], message: str) -> None:
    response = client.get("/search", params={"user": "alice", **params})
    assert response.status_code == 422 and message in response.text


# Threads and settings ---------------------------------------------------------------------------
def test_threads_list_the_imports_and_open_them(client: TestClient) -> None:
    page = client.get("/threads?user=alice").text
    assert "Bread baking" in page and "Planning the week" in page
    link = re.search(r'href="(/\?user=alice&amp;thread=[^"]*openai-2[^"]*)"', page)
    assert link, page
    assert "sourdough" in client.get(link.group(1).replace("&amp;", "&")).text


def test_settings_show_status_never_the_token(client: TestClient) -> None:
    page = client.get("/settings?user=alice").text
    assert "Messages not yet vector-indexed" in page and "day_summary_every" in page
    assert TOKEN not in page and "not set" not in page.split("api_token")[1][:80]
    response = client.post("/settings/index", data={"user": "alice"})
    assert response.status_code == 303 and response.headers["location"] == "/settings?user=alice"
    assert "Index run for alice" in client.get(response.headers["location"]).text  # the outcome, once
    assert "Index run for alice" not in client.get(response.headers["location"]).text


# Pure helpers -----------------------------------------------------------------------------------
def test_highlight_escapes_and_marks_word_starts() -> None:
    assert highlight("<b>Ordered</b> A-7731", ["order", "a", "7731"]) == \
        "&lt;b&gt;<mark>Ordered</mark>&lt;/b&gt; A-<mark>7731</mark>"
    assert highlight("A-7731 or 7731", ["7731", "a-7731"]) == "<mark>A-7731</mark> or <mark>7731</mark>"
    assert highlight("a <i>", []) == "a &lt;i&gt;"


def test_markdown_keeps_html_as_text() -> None:
    html = markdown("- <script>x</script> **bold**")
    assert "&lt;script&gt;" in html and "<strong>bold</strong>" in html
    assert [s.title for s in sections("## Summary\nok\n## Goals\n- none noted")] == ["Summary", "Goals"]
    assert sections("## Goals\n- none noted")[0].empty
    assert plain("## Summary Alice **asked**") == "Summary Alice asked"


def test_pick_day_defaults_to_the_latest_day_with_messages() -> None:
    days = [date(2024, 3, 4), date(2024, 3, 12)]
    assert pick_day(None, today=date(2026, 1, 1), days=days)[0] == date(2024, 3, 12)
    assert pick_day("", today=date(2024, 3, 12), days=days) == (date(2024, 3, 12), None)
    assert pick_day("yesterday", today=date(2024, 3, 1), days=days)[0] == date(2024, 2, 29)
    with pytest.raises(InvalidInputError, match="use a date like"):
        pick_day("2024-3-4", today=date(2024, 3, 1), days=days)


def test_fold_groups_covered_runs_and_opens_the_one_holding_the_target() -> None:
    def entry(i: int, covered: bool) -> TimelineEntry:
        at = datetime(2024, 3, 4, 9, i, tzinfo=timezone.utc)
        view = MessageView(f"m{i}", i, "user", None, f"text {i}", at, date(2024, 3, 4), "c", (), "t", "d")
        return TimelineEntry(view, "turn", "s1" if covered else None)

    blocks = fold([entry(1, True), entry(2, True), entry(3, False), entry(4, True)],
                  ZoneInfo("Europe/Paris"), open_id="m2")
    assert [(b.folded, len(b.rows), b.open) for b in blocks] == [(True, 2, True), (False, 1, False), (True, 1, False)]
    assert blocks[0].rows[0].time == "10:01"
