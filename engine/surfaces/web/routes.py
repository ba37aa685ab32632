"""The pages: a day (summary and timeline), search, threads and settings, each a few facade calls.

Query parameters are read as text and checked here, so a bad one gets a sentence saying what to
type instead. Forms post and redirect (303) to the page that shows their effect.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response

from engine.errors import InvalidInputError, UnknownUserError
from engine.query.navigation_results import MessageView
from engine.query.search_types import LIMIT_RANGE, MAX_RECENCY_DAYS, recency_in_range
from engine.timeutil import zone
from engine.surfaces.web.auth import Viewer
from engine.surfaces.web.session import CurrentViewer, Engine, WebRoute, href, render, see_other
from engine.surfaces.web.views import (MAX_MESSAGE_CHARS, fold, highlight, month_grid, month_of, month_step, pick_day,
                                       plain, score_rows, sections)

__all__ = ["router"]

router = APIRouter(route_class=WebRoute, include_in_schema=False)
ROLES = ("user", "assistant", "system")
Text = Annotated[str, Form()]


def _user(engine: Engine, viewer: Viewer, asked: str | None) -> tuple[str | None, list[str]]:
    """The user to show and the users the picker offers (only an admin gets a choice)."""
    if viewer.user_id is not None:
        return viewer.user_id, [viewer.user_id]
    users = engine.users()
    if asked:
        if asked not in users:
            raise UnknownUserError(f"unknown user {asked[:80]!r}: pick one of the list")
        return asked, users
    return (users[0] if users else None), users


def _frame(viewer: Viewer, user: str | None, users: list[str], nav: str, thread: str | None = None) -> dict[str, Any]:
    """What every page's frame shows: the nav, the user picker, the thread."""
    return {"viewer": viewer, "user": user, "users": users, "nav": nav, "thread": thread}


# Main screen -----------------------------------------------------------------------------------
@router.get("/")
def day_page(request: Request, engine: Engine, viewer: CurrentViewer, user: str | None = None,
             thread: str | None = None, day: str | None = None, open: str | None = None,
             month: str | None = None) -> Response:
    user_id, users = _user(engine, viewer, user)
    if user_id is None:
        return render(request, "empty.html", _frame(viewer, None, users, "day"))
    return _day(request, engine, viewer, user_id, users, thread, day, open, month)


def _day(request: Request, engine: Engine, viewer: Viewer, user: str, users: list[str], thread: str | None,
         day: str | None, open_id: str | None, month: str | None, *, error: str | None = None,
         draft: str = "", status: int = 200) -> Response:
    if thread and any(t.thread_id == thread and t.mode == "continuous" for t in engine.list_threads(user)):
        thread = None  # the continuous thread is the default view, named or not
    days = [d.day_label for d in engine.list_days(user, thread)]
    today = engine.today(user)
    chosen, chose_notice = pick_day(day, today=today, days=days)
    timeline = engine.day_timeline(user, chosen, thread_id=thread)
    shown = month_of(month, chosen)
    context = _frame(viewer, user, users, "day", thread) | {
        "day": chosen, "today": today, "yesterday": today - timedelta(days=1), "timeline": timeline,
        "blocks": fold(timeline.entries, zone(timeline.timezone), open_id), "open_id": open_id,
        "tz": zone(timeline.timezone),
        "sections": sections(timeline.summary.markdown) if timeline.summary else [],
        "weeks": month_grid(shown, days, chosen, today), "month": shown,
        "prev_month": _month_label(month_step(shown, -1)), "next_month": _month_label(month_step(shown, 1)),
        "days": days, "chose_notice": chose_notice, "error": error, "draft": draft, "roles": ROLES,
        "covered": sum(1 for e in timeline.entries if e.covered_by is not None),
    }
    return render(request, "day.html", context, status)


def _month_label(first: date | None) -> str | None:
    return first.strftime("%Y-%m") if first else None


@router.post("/compose")
def compose(request: Request, engine: Engine, viewer: CurrentViewer, user: Text = "", thread: Text = "",
            day: Text = "", role: Text = "user", content: Text = "") -> Response:
    """Append a message to the thread, then show it in its day. A browser sends a textarea's line
    breaks as CRLF: they are stored as the API's messages have them, LF (and counted so)."""
    content = content.replace("\r\n", "\n")
    user_id, users = _user(engine, viewer, user or None)
    if user_id is None:
        raise InvalidInputError("there is no user yet: ingest messages first (convsearch ingest FILE)")
    problem = _message_problem(role, content)
    if problem:
        return _day(request, engine, viewer, user_id, users, thread or None, day or None, None, None,
                    error=problem, draft=content, status=422)
    result = engine.ingest(user_id, [{"role": role, "content": content}], thread_id=thread or None)
    if not result.inserted:
        return see_other(href("/", user=user_id, thread=thread, day=day))
    sent = engine.get(user_id, message_id=result.inserted[0])
    assert isinstance(sent, MessageView)  # a message id gets a message
    target = href("/", user=user_id, thread=thread, day=sent.day_label.isoformat(), open=sent.message_id)
    return see_other(f"{target}#m-{sent.message_id}")


def _message_problem(role: str, content: str) -> str | None:
    if role not in ROLES:
        return f"role must be one of {', '.join(ROLES)}, got {role[:40]!r}"
    if not content.strip():
        return "The message is empty: type some text before sending."
    if len(content) > MAX_MESSAGE_CHARS:
        return (f"The message has {len(content):,} characters; the composer takes at most {MAX_MESSAGE_CHARS:,}. "
                "Split it, or import a long text with `convsearch ingest FILE`.")
    return None


@router.post("/regenerate")
def regenerate(engine: Engine, viewer: CurrentViewer, user: Text = "", thread: Text = "", day: Text = "") -> Response:
    """Rewrite the day's summary now."""
    user_id, _ = _user(engine, viewer, user or None)
    if user_id is None:
        raise InvalidInputError("there is no user yet: ingest messages first")
    label, _ = pick_day(day, today=engine.today(user_id), days=[])
    if label not in [d.day_label for d in engine.list_days(user_id, thread or None)]:
        raise InvalidInputError(f"{label.isoformat()} has no messages, so it has no summary: pick a marked day")
    engine.regenerate_day_summary(user_id, label, thread_id=thread or None)
    return see_other(href("/", user=user_id, thread=thread, day=label.isoformat()),
                     notice=f"Summary of {label.isoformat()} regenerated.")


def _form_page(request: Request, user: str | None = None) -> Response:
    """A form's address opened by itself (a reload after its error page, a restored tab): the page
    the form is on, not a 405."""
    return see_other(href(FORM_PAGES[request.url.path], user=user))


FORM_PAGES = {"/compose": "/", "/regenerate": "/", "/settings/index": "/settings"}
for _path in FORM_PAGES:
    router.add_api_route(_path, _form_page, methods=["GET"])


# Search ----------------------------------------------------------------------------------------
@router.get("/search")
def search_page(request: Request, engine: Engine, viewer: CurrentViewer, user: str | None = None,
                q: str | None = None, scope: str = "all", day: str | None = None, recency: str | None = None,
                limit: str | None = None, thread: str | None = None) -> Response:
    user_id, users = _user(engine, viewer, user)
    form = {"q": q or "", "scope": scope, "day": day or "", "recency": recency or "", "limit": limit or "6"}
    context = _frame(viewer, user_id, users, "search", thread) | {"form": form, "response": None,
                                                                                   "hits": [], "error": None}
    if q is None or user_id is None:
        return render(request, "search.html", context)
    try:
        options = _search_options(scope, day, recency, limit, today=engine.today(user_id))
        if not q.strip():
            raise InvalidInputError("The query is empty: type a few words to search for.")
        response = engine.search(user_id, q, explain=True, **options)
    except InvalidInputError as exc:
        return render(request, "search.html", context | {"error": exc.message}, 422)
    hits = [{"hit": h, "snippet": highlight(plain(h.snippet), response.terms), "parts": score_rows(h.parts),
             "open": _open_link(user_id, h)} for h in response.results]
    return render(request, "search.html", context | {"response": response, "hits": hits})


def _search_options(scope: str, day: str | None, recency: str | None, limit: str | None, *,
                    today: date) -> dict[str, Any]:
    options: dict[str, Any] = {"limit": _whole("limit", limit or "6", *LIMIT_RANGE)}
    if scope not in ("all", "day"):
        raise InvalidInputError(f"scope must be 'day' or 'all', got {scope[:20]!r}")
    if scope == "day":
        options["day"] = pick_day(day or "today", today=today, days=[])[0]
    if recency:
        try:
            days = float(recency)
        except ValueError:
            days = None
        if days is None or not recency_in_range(days):
            raise InvalidInputError(f"Recency must be a number of days, more than 0 and at most {MAX_RECENCY_DAYS}, "
                                    f"like 7 (or empty for any time), got {recency[:20]!r}")
        options["recency_days"] = days
    return options


def _whole(name: str, text: str, low: int, high: int) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or not low <= int(digits) <= high:
        raise InvalidInputError(f"{name} must be a whole number from {low} to {high}, got {text[:20]!r}")
    return int(text)


def _open_link(user: str, hit: Any) -> str | None:
    """Where Open goes: the hit's day with the message highlighted (a summary opens its day)."""
    if hit.day_label is None:
        return None
    base = href("/", user=user, thread=hit.thread_id, day=hit.day_label.isoformat(), open=hit.message_id)
    return f"{base}#m-{hit.message_id}" if hit.message_id else base


# Threads and settings --------------------------------------------------------------------------
@router.get("/threads")
def threads_page(request: Request, engine: Engine, viewer: CurrentViewer, user: str | None = None) -> Response:
    user_id, users = _user(engine, viewer, user)
    rows = []
    for t in engine.list_threads(user_id) if user_id else []:
        days = engine.list_days(t.user_id, t.thread_id)
        rows.append({"thread": t, "days": len(days), "first": days[0].day_label if days else None,
                     "last": days[-1].day_label if days else None,
                     "link": href("/", user=user_id, thread=None if t.mode == "continuous" else t.thread_id)})
    return render(request, "threads.html", _frame(viewer, user_id, users, "threads") | {"rows": rows})


@router.get("/settings")
def settings_page(request: Request, engine: Engine, viewer: CurrentViewer, user: str | None = None) -> Response:
    user_id, users = _user(engine, viewer, user)
    values = engine.settings.shown()
    context = _frame(viewer, user_id, users, "settings") | {
        "values": sorted(values.items()), "status": engine.index_status(user_id) if user_id else None,
        "stats": engine.stats(user_id) if user_id else None}
    return render(request, "settings.html", context)


@router.post("/settings/index")
def run_index(engine: Engine, viewer: CurrentViewer, user: Text = "") -> Response:
    """Embed the user's messages that have no vector yet."""
    user_id, _ = _user(engine, viewer, user or None)
    if user_id is None:
        raise InvalidInputError("there is no user yet: ingest messages first")
    report = engine.index(user_id)[0]
    notice = (f"Index run for {user_id}: {report.chunks_added} windows added, {report.embeddings_computed} "
              f"embeddings computed, {report.embeddings_reused} reused ({report.seconds:.1f} s).")
    return see_other(href("/settings", user=user_id), notice=notice)
