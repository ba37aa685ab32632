"""The web page in a real headless Chromium (Debian's, driven by Playwright) against a real `convsearch serve`.

The sample goes in through the live ingest path first (day summaries, notes, folding), then the
tests log in, read days, search, open a hit, regenerate a summary and write messages, as a person
would. They take the screenshots docs/web.md shows, into a temporary folder unless
CONVSEARCH_SCREENSHOTS names one (`CONVSEARCH_SCREENSHOTS=docs/img` refreshes the docs' pictures).
Without Chromium they skip and say how to get it; under CI (CI=true) a missing browser fails instead, since .ci/run installs it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from engine.api import ConversationEngine
from tests.web_support import TOKEN, feed_sample, serve, settings

CHROMIUM = os.environ.get("CONVSEARCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: pip install -e '.[dev]'"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}: `apt-get install chromium` (.ci/run does it) to run the browser tests"
    return None


if (_reason := _missing()) is not None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run in CI: {_reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {_reason}", allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("web") / "home"
    with ConversationEngine(home, settings=settings()) as engine:
        feed_sample(engine)
    yield from serve(home, home.parent / "serve.log")


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: pytest's temporary folders (it keeps the last three runs'), so a run
    leaves the work tree as it was and /tmp no fuller; the docs' pictures change only when asked for."""
    return Path(os.environ.get("CONVSEARCH_SCREENSHOTS") or tmp_path_factory.mktemp("screens"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, base_url: str) -> Iterator[Page]:
    context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def log_in(page: Page, target: str = "/?user=alice") -> None:
    page.goto(target)
    page.fill("#token", TOKEN)
    page.click("button:has-text('Log in')")
    expect(page.locator("header nav")).to_be_visible()


def test_without_the_cookie_the_page_asks_for_the_token(page: Page) -> None:
    page.goto("/search?user=alice&q=database")
    assert "/login" in page.url
    page.fill("#token", "wrong-token")
    page.click("button:has-text('Log in')")
    expect(page.locator(".error")).to_contain_text("not valid")
    page.fill("#token", TOKEN)
    page.click("button:has-text('Log in')")
    assert page.url.endswith("/search?user=alice&q=database")  # back where it was going
    cookie = next(c for c in page.context.cookies() if c["name"] == "convsearch_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # scripts cannot read it


def test_a_day_shows_its_summary_and_folds_what_it_covers(page: Page, screens: Path) -> None:
    log_in(page)
    expect(page.locator("h1.dayhead")).to_contain_text("12 March 2024")  # no messages today: the latest day
    page.screenshot(path=str(screens / "web-day.png"), full_page=False)
    page.click(".cal td.has a[title^='2024-03-04']")  # a marked day of the calendar
    expect(page.locator("h1.dayhead")).to_contain_text("Monday 04 March 2024")
    summary = page.locator("section.summary .md")
    expect(summary).to_contain_text("Summary")
    expect(summary).to_contain_text("PostgreSQL")
    folded = page.locator("details.folded").first
    expect(folded.locator(":scope > summary")).to_contain_text("Older messages folded")
    first = page.locator("#m-alice-0001")
    expect(first).to_be_hidden()
    page.screenshot(path=str(screens / "web-folded.png"), full_page=True)
    folded.locator(":scope > summary").click()
    expect(first).to_be_visible()
    expect(first.locator(".text")).to_contain_text("settle the database question")
    tool = page.locator("article.kind-tool").first
    tool_text = tool.locator("details .text")
    expect(tool_text).to_be_hidden()
    tool.locator("summary").click()  # tool outputs open with "expand"
    expect(tool_text).to_be_visible()


def test_notes_are_folded_and_the_day_picker_marks_days(page: Page) -> None:
    log_in(page, "/?user=alice&day=2024-03-12")
    note = page.locator("article.kind-note").first
    expect(note.locator("summary")).to_contain_text("Day summary updated")
    expect(note.locator("details")).not_to_have_attribute("open", "")
    marked = page.locator(".cal td.has a").evaluate_all("els => els.map(e => e.title.slice(0, 10))")
    assert marked == ["2024-03-04", "2024-03-05", "2024-03-06", "2024-03-07", "2024-03-08", "2024-03-09",
                      "2024-03-12"]
    page.fill("input[name=day][type=date]", "2024-03-07")
    page.click("form.pick button")
    expect(page.locator("h1.dayhead")).to_contain_text("07 March 2024")


def test_search_highlights_and_open_lands_on_the_message(page: Page, screens: Path) -> None:
    log_in(page, "/search?user=alice")
    page.fill("input[name=q]", "order A-7731")
    page.click("form.searchform button[type=submit]")
    hit = page.locator("li.result.kind-message").first
    expect(hit.locator("mark").first).to_be_visible()
    marks = hit.locator("mark").all_inner_texts()
    assert "A" not in marks and any("7731" in m for m in marks) and any(m.lower().startswith("order") for m in marks)
    expect(hit.locator("table.parts")).to_contain_text("lexical")
    page.screenshot(path=str(screens / "web-search.png"), full_page=False)
    hit.locator("a.open").click()
    assert page.url.endswith("#m-alice-0038")
    target = page.locator("#m-alice-0038")
    expect(target).to_have_class(re.compile(r"\bhighlighted\b"))
    expect(target).to_be_in_viewport()
    expect(target).to_contain_text("A-7731")


def test_regenerate_summary_rewrites_it_and_leaves_a_note(page: Page) -> None:
    log_in(page, "/?user=alice&day=2024-03-08")
    notes_before = page.locator("article.kind-note").count()
    page.click("button:has-text('Regenerate summary')")
    expect(page.locator(".notice")).to_contain_text("Summary of 2024-03-08 regenerated")
    expect(page.locator("section.summary .md")).to_contain_text("Summary")
    page.goto("/?user=alice&day=2024-03-08")
    notes = page.locator("article.kind-note")
    if notes.count() == notes_before:  # the note lands at the thread's end, i.e. on its last day
        page.goto("/?user=alice&day=2024-03-12")
    expect(page.locator("article.kind-note summary").last).to_contain_text("2024-03-08")


def test_a_sent_message_shows_and_is_found(page: Page) -> None:
    log_in(page)
    page.fill("textarea[name=content]", "Reminder: the quokka-zanzibar badge order goes out on Friday.")
    page.click("section.composer button[type=submit]")
    target = page.locator("article.highlighted")
    expect(target).to_contain_text("quokka-zanzibar")
    expect(target).to_be_in_viewport()
    page.goto("/search?user=alice&q=quokka-zanzibar+badge&scope=all")
    expect(page.locator("li.result.kind-message").first).to_contain_text("quokka")


def test_bad_input_on_every_form(page: Page) -> None:
    log_in(page, "/search?user=alice")
    page.click("form.searchform button[type=submit]")  # empty query
    expect(page.locator(".error")).to_contain_text("query is empty")
    page.goto("/?user=alice&day=2024-02-30")
    expect(page.locator(".error")).to_contain_text("is not a day")
    page.goto("/?user=alice&day=2024-03-06")
    page.fill("textarea[name=content]", "x" * 25_000)  # huge
    page.click("section.composer button[type=submit]")
    expect(page.locator(".composer .error")).to_contain_text("at most 20,000")
    page.fill("textarea[name=content]", "   ")
    page.click("section.composer button[type=submit]")
    expect(page.locator(".composer .error")).to_contain_text("empty")


def test_html_in_a_message_is_shown_as_text_never_run(page: Page) -> None:
    log_in(page)
    hostile = '<script>window.__owned = 1</script><img src=x onerror="window.__owned = 2"><b>bold?</b>'
    page.fill("textarea[name=content]", hostile)
    page.click("section.composer button[type=submit]")
    sent = page.locator("article.highlighted .text")
    expect(sent).to_have_text(hostile)
    assert page.evaluate("window.__owned") is None
    assert page.locator("article.highlighted img, article.highlighted script, article.highlighted b").count() == 0
    page.goto("/search?user=alice&q=owned+script&scope=all")
    expect(page.locator("li.result.kind-message .snippet").first).to_contain_text("<script>")
    assert page.evaluate("window.__owned") is None


def test_threads_and_settings(page: Page) -> None:
    log_in(page, "/threads?user=alice")
    page.click("a:has-text('Bread baking')")
    expect(page.locator(".timeline")).to_contain_text("sourdough")
    page.click("header nav a:has-text('Settings')")
    expect(page.locator("section[aria-label='Index status']")).to_contain_text("all-MiniLM-L6-v2")
    expect(page.locator("section[aria-label='Effective settings']")).to_contain_text("day_summary_every")
    assert TOKEN not in page.content()
    page.goto("/settings?user=bob")  # bob was stored without vectors; the server's background step embeds him
    page.click("button:has-text('Run index')")
    expect(page.locator(".notice")).to_contain_text("Index run for bob")
    expect(page.locator("td.pending")).to_have_text("0")


def test_the_user_picker_switches_user(page: Page) -> None:
    log_in(page)
    page.select_option("select[name=user]", "bob")
    page.click("form.picker button")
    expect(page.locator("h1.dayhead")).to_contain_text("10 March 2024")  # bob's latest day
    expect(page.locator(".timeline")).not_to_contain_text("PostgreSQL")
