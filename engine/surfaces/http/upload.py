"""`POST /api/import`: a file sent as the raw request body, imported as `convsearch ingest FILE` does.

The query parameters are checked before a byte of the body is read: UTF-8 (Starlette reads other
bytes as U+FFFD, which named a user "\\ufffd\\ufffd") without NUL, and a `suffix` that can end a file
name (a NUL in it was a 500). The body streams into a temporary file in the data directory, capped by
`max_import_bytes` instead of the body limit. The report and its errors name the file as the client
named it (`suffix`), never the server's temporary path.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, Query, Request
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from engine.api import ConversationEngine
from engine.errors import ConvsearchError, InvalidInputError
from engine.surfaces.http.requests import refuse_nul
from engine.surfaces.serialize import to_jsonable

__all__ = ["router", "UPLOAD_PATH"]

UPLOAD_PATH = "/api/import"
MAX_NAME_CHARS = 255  # a file name's longest on common file systems
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
router = APIRouter()


def _file_name(value: str) -> str:
    if len(value) > MAX_NAME_CHARS or _CONTROL.search(value):
        raise PydanticCustomError(
            "file_name", "the uploaded file's name, or just its extension ('chat.jsonl' or '.jsonl'): at "
            "most {most} characters, none of them NUL or another control character", {"most": MAX_NAME_CHARS})
    return value


FileName = Annotated[str, AfterValidator(_file_name)]
Text = Annotated[str, AfterValidator(refuse_nul)]


def query_is_utf8(request: Request) -> None:
    """Every query parameter is percent-encoded UTF-8, or 422 naming the parameter."""
    for pair in request.scope.get("query_string", b"").split(b"&"):
        name, _, value = pair.partition(b"=")
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"query parameter {name.decode('latin-1')[:40]!r} is not UTF-8: percent-encode "
                                    "the text's UTF-8 bytes (e.g. 'é' as %C3%A9)") from None


@router.post(UPLOAD_PATH.removeprefix("/api"), dependencies=[Depends(query_is_utf8)])
async def import_file(
    request: Request,
    format: Annotated[Text, Query(description="The file's format, as `convsearch ingest --format`.")],
    user_id: Annotated[Text | None, Query(description="The user to import into (formats without users).")] = None,
    timezone: Annotated[Text | None, Query(description="IANA zone of a new user.")] = None,
    skip_bad: Annotated[bool, Query(description="Skip bad records instead of refusing the file.")] = False,
    update: Annotated[bool, Query(description="A re-imported id whose text changed gets the new text.")] = False,
    suffix: Annotated[FileName, Query(description="The file's name, for its extension.")] = "",
) -> dict[str, Any]:
    """Import the file sent as the raw body (what `convsearch ingest FILE` does beside a running server)."""
    engine: ConversationEngine = request.app.state.engine
    limit, name = engine.settings.max_import_bytes, Path(suffix).name or "upload"
    with tempfile.NamedTemporaryFile(prefix=".upload-", suffix=Path(suffix).suffix[:16], dir=engine.home) as tmp:
        size = 0
        try:
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise InvalidInputError(f"the file is larger than {limit} bytes (CONVSEARCH_MAX_IMPORT_BYTES)")
                tmp.write(part)
        except ClientDisconnect:  # the client went away: its mistake or its network, not the server's
            raise InvalidInputError(f"the upload stopped after {size} bytes (the client disconnected): nothing was "
                                    "imported; send the whole file again") from None
        tmp.flush()
        try:
            report = await run_in_threadpool(engine.import_file, tmp.name, fmt=format, user_id=user_id,
                                             timezone=timezone, skip_bad=skip_bad, update=update)
        except ConvsearchError as exc:
            exc.message = exc.message.replace(tmp.name, name)  # the client's name for the file, not ours
            exc.args = (exc.message,)
            raise
    return {**to_jsonable(report), "path": name}
