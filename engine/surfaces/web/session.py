"""The page's plumbing: templates, the login form, and one route class that turns errors into pages.

Every web route is a `WebRoute`: a form posted from another site is refused (403), a missing or
wrong token redirects to /login (never a JSON 401),
and an engine error or a bad query parameter renders the error page with the engine's message
and status, so a person always sees what to do instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Callable, Coroutine
from urllib.parse import quote, unquote, urlencode, urlsplit

from fastapi import APIRouter, Depends, Form, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from engine.api import ConversationEngine
from engine.errors import ConvsearchError
from engine.surfaces.web.auth import COOKIE, Viewer, auth_on, resolve_token, viewer_of

__all__ = ["WebRoute", "LoginRequired", "CurrentViewer", "Engine", "render", "error_page", "href", "see_other",
           "login_router", "templates"]

log = logging.getLogger("convsearch.web")
NOTICE_COOKIE = "convsearch_notice"
templates = Jinja2Templates(directory=Path(__file__).with_name("templates"))


class LoginRequired(Exception):
    """The request has no valid token: the viewer goes to the login form."""


def href(path: str, **params: object) -> str:
    """A local link with the given query parameters (None and "" left out)."""
    given = {k: str(v) for k, v in params.items() if v is not None}
    query = urlencode({k: v for k, v in given.items() if v})
    return f"{path}?{query}" if query else path


templates.env.globals["href"] = href


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    """A page, never kept by the browser: Back after Log out must not show what the token opened."""
    engine: ConversationEngine = request.app.state.engine
    notice = request.cookies.get(NOTICE_COOKIE)
    base = {"auth_on": auth_on(engine.settings), "path": request.url.path, "viewer": viewer_of(request),
            "notice": unquote(notice) if notice else None}
    response = templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
    response.headers["Cache-Control"] = "no-store"
    if notice is not None:
        response.delete_cookie(NOTICE_COOKIE, path="/")  # shown once
    return response


def error_page(request: Request, message: str, code: str, status: int) -> HTMLResponse:
    """The error page, its links keeping the user the request was about (when it is one the viewer may see)."""
    return render(request, "error.html", {"message": message, "code": code, "user": _asked_user(request)}, status)


def _asked_user(request: Request) -> str | None:
    viewer = viewer_of(request)
    if viewer is None or viewer.user_id is not None:
        return viewer.user_id if viewer else None
    asked = request.query_params.get("user")
    try:
        return request.app.state.engine.users(asked)[0] if asked else None  # checked to exist
    except ConvsearchError:  # unknown, or the page that says what went wrong must not fail itself
        return None


def see_other(url: str, *, notice: str | None = None) -> RedirectResponse:
    """The 303 after a form; its `notice` rides in a cookie the next page shows once, not in the URL
    (where a link from anyone could show any text as the server's, and a reload repeats it)."""
    response = RedirectResponse(url, status_code=303)
    if notice:
        response.set_cookie(NOTICE_COOKIE, quote(notice), httponly=True, samesite="strict", path="/", max_age=60)
    return response


def _login_url(request: Request) -> str:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/login?next=" + quote(here if request.method == "GET" else "/", safe="")


class WebRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            if request.method == "POST" and not _same_origin(request):
                message = "this form was sent from another site: open the page on this server and send it from there"
                return error_page(request, message, "cross_site", 403)
            try:
                return await inner(request)
            except LoginRequired:
                return see_other(_login_url(request))
            except ConvsearchError as exc:
                return error_page(request, exc.message, exc.code, exc.http_status)
            except RequestValidationError as exc:
                parts = [f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()]
                return error_page(request, "; ".join(parts), "invalid_input", 422)
            except HTTPException:
                raise  # the app's handler answers it with its own status
            except Exception:  # a person gets a page, as the API's callers get JSON; the log has the trace
                log.exception("web.internal_error path=%s", request.url.path)
                return error_page(request, "Something went wrong on the server (it is logged there): go back "
                                  "and try again, or report it with the time it happened.", "internal", 500)

        return handler


def _same_origin(request: Request) -> bool:
    """A form posted from this site (or by a client that names no origin, like curl).

    With auth off there is no cookie for SameSite to protect, so a page elsewhere could post to a
    loopback server: the browser's Origin and Sec-Fetch-Site headers say where a form came from.
    """
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host", "")


def _viewer(request: Request) -> Viewer:
    viewer = viewer_of(request)
    if viewer is None:
        raise LoginRequired()
    return viewer


def _engine(request: Request) -> ConversationEngine:
    return request.app.state.engine  # type: ignore[no-any-return]


CurrentViewer = Annotated[Viewer, Depends(_viewer)]
Engine = Annotated[ConversationEngine, Depends(_engine)]
login_router = APIRouter(route_class=WebRoute, include_in_schema=False)


def _safe_next(target: str) -> str:
    """Only a path of this site: never another host (`//evil`, `https://...`)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


@login_router.get("/login")
def login_form(request: Request, engine: Engine, next: str = "/") -> Response:
    if not auth_on(engine.settings):
        return see_other("/")
    return render(request, "login.html", {"next": _safe_next(next), "error": None})


@login_router.post("/login")
def login(request: Request, engine: Engine, token: Annotated[str, Form()] = "",
          next: Annotated[str, Form()] = "/") -> Response:
    if resolve_token(engine.settings, token) is None:
        error = "Type the token." if not token.strip() else "That token is not valid: use CONVSEARCH_API_TOKEN."
        return render(request, "login.html", {"next": _safe_next(next), "error": error}, 401)
    response = see_other(_safe_next(next))
    response.set_cookie(COOKIE, token.strip(), httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@login_router.get("/logout")
def logout_reopened() -> Response:
    """/logout typed or reopened: the form's button logs out; a GET changes nothing."""
    return see_other("/")


@login_router.post("/logout")
def logout() -> Response:
    response = see_other("/login")
    response.delete_cookie(COOKIE, path="/")
    return response
