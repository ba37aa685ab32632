"""How the HTTP surface answers what went wrong: always `{"error": {"code", "message"}}` (auth.error_response).

Engine errors keep their code and status. A request the routes cannot read (bad JSON, not UTF-8,
nested too deep, the wrong Content-Type, a field of the wrong type) is 422 `invalid_input` with what to
send instead; the framework's own answers (400 "There was an error parsing the body", 405 "Method Not
Allowed", pydantic's "0: JSON decode error") said what failed but not what to do. Only bugs are 500
`internal`, logged.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import ConvsearchError
from engine.surfaces.http.auth import error_response
from engine.text_rules import cut
from engine.surfaces.web import missing_page, wants_page

__all__ = ["add_error_handlers", "HTTP_CODES"]

log = logging.getLogger("convsearch.http")
HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large", 415: "unsupported_media_type"}
SEND_JSON = "send one JSON object, UTF-8, with Content-Type: application/json"
JSON = SEND_JSON.removeprefix("send ")
NOT_AN_OBJECT = {"model_type", "model_attributes_type", "dict_type"}


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ConvsearchError, _engine_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal)


async def _engine_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ConvsearchError)
    return error_response(exc.http_status, exc.code, exc.message)


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = [_problem(error, request, exc.body) for error in exc.errors()]
    return error_response(422, "invalid_input", "; ".join(dict.fromkeys(parts)) or "invalid request")


def _problem(error: dict[str, Any], request: Request, body: Any) -> str:
    """One validation error in words: where, what, and for a body that is no JSON object, what to send."""
    where, kind = ".".join(str(p) for p in error["loc"][1:]), error["type"]
    if kind == "json_invalid":
        at = int(error["loc"][-1])
        text = body if isinstance(body, str) else ""
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        return (f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'decode error')} at line {line} "
                f"column {column}, character {at}): {SEND_JSON}")
    if not where and kind == "missing":
        return f"this route needs a body: {SEND_JSON}"
    if not where and kind in NOT_AN_OBJECT:
        sent = request.headers.get("content-type")
        if sent is None or "json" not in sent.lower():
            return f"the body was not read as JSON (Content-Type: {cut(sent or 'none')}): {SEND_JSON}"
        return f"the body must be a JSON object ({{...}}), not {type(error.get('input')).__name__}: {SEND_JSON}"
    return f"{where}: {error['msg']}" if where else str(error["msg"])  # a rule over the whole body says which fields


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404 and wants_page(request):
        return missing_page(request)
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not parse the body
        return error_response(422, "invalid_input", _unreadable(exc.__cause__))
    message, headers = str(exc.detail), dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = headers.get("Allow", "POST")
        message = f"{request.method} is not allowed on {request.url.path}: use {allowed}" + \
            (f" with a body of {JSON}" if allowed == "POST" else "")
    elif exc.status_code == 404:
        message = f"no route {request.method} {cut(request.url.path)}: the routes are listed at /docs"
    return error_response(exc.status_code, HTTP_CODES.get(exc.status_code, "http_error"), message, headers or None)


def _unreadable(cause: BaseException) -> str:
    """Why a body could not be read as JSON, and what to send instead."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not UTF-8 (byte {cause.object[cause.start]:#04x} at offset {cause.start}): {SEND_JSON}"
    if isinstance(cause, RecursionError):
        return f"the body nests arrays or objects too deeply to read: send flatter JSON ({JSON})"
    return f"the body could not be read ({type(cause).__name__}): {SEND_JSON}"


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.exception("http.internal_error path=%s", request.url.path, exc_info=exc)
    return error_response(500, "internal", "internal error (logged on the server); please report it")

