"""Fuzzing the public Python API: whatever a caller passes (any Unicode, control characters, a
100 KB query, SQL and regex metacharacters, numbers out of range, malformed timestamps and ids,
wrong types), every call returns a result or raises a ConvsearchError subclass, nothing else.

One engine with the real model serves the module; cases per property are printed at the end
(`pytest -s`) and recorded in docs/reliability.md.
"""

from __future__ import annotations

import collections
import math
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api import ConversationEngine
from engine.errors import ConvsearchError
from engine.importers import FORMATS
from engine.models import NewMessage
from tests.support import live_server, real_embedder

try:  # a dev dependency; the Python API fuzzing runs without it
    import schemathesis
    # Compiled now, at collection: compiling its modules inside the test (pytest rewrites a plugin's
    # modules as they are imported), with a live server's threads running and hypothesis changing the
    # recursion limit, failed once in CI with CPython 3.11's "AST constructor recursion depth mismatch".
    import schemathesis.specs.openapi.schemas  # noqa: F401
except ImportError:
    schemathesis = None

pytestmark = pytest.mark.model  # see tests/conftest.py (--fast)

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
USERS = ("alice", "bob")
CASES: collections.Counter[str] = collections.Counter()
FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Strategies -----------------------------------------------------------------------------------------
SPECIAL = st.sampled_from([
    "", " ", "\x00", "\x00abc", "\x1b[31mred", "\r\n\t", "\ud800", "\udfff lone", "\u202e\u200b\ufeff", "🦓💎" * 50,
    "'; DROP TABLE messages; --", "\" OR 1=1 --", "%", "_%_", "\\", "\\x00", ".*", "(?P<x>", "[", "a{99999}",
    "$1 ${x} {{x}}", "NULL", "null", "None", "NaN", "-1", "1e309", "0x7fffffffffffffff", "9" * 40,
    "2024-13-45T99:99", "2024-02-30", "9999-12-31T23:59:59+14:00", "9999-12-31T23:59:59-12:00", "0001-01-01",
    "0001-01-01T00:00:00+14:00", "2024-05-01T10:00:00+25:00",
    "2024-05-01T10:00Z", "yesterday", "alice", "alice:continuous", "alice:continuous:day:2024-05-01",
    "alice:continuous:conv:1", "bob:continuous:conv:1", "m-alice-0", "m-bob-0", "x" * 100_000, "word " * 20_000,
])
EDGES = [datetime.max.replace(tzinfo=timezone(timedelta(hours=-12))),
         datetime.min.replace(tzinfo=timezone(timedelta(hours=14))), datetime.max, datetime.min, date.max, date.min]
TEXT = st.one_of(SPECIAL, st.text(max_size=300), st.text(st.characters(codec="utf-8"), max_size=40))
INTS = st.one_of(st.integers(-3, 30), st.sampled_from([0, -1, 2**31, 2**63, -(2**63), 10**30]))
FLOATS = st.floats(allow_nan=True, allow_infinity=True)
SCALAR = st.one_of(st.none(), st.booleans(), INTS, FLOATS, TEXT, st.binary(max_size=20),
                   st.just(T0), st.just(date(2024, 5, 1)), st.just(object()), st.just(math.pi), st.sampled_from(EDGES))
ANY = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                   max_leaves=6)
USER = st.one_of(st.sampled_from(USERS), TEXT, SCALAR)


def messages() -> st.SearchStrategy[Any]:
    fields = {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), ANY),
              "content": st.one_of(TEXT, ANY),
              "created_at": st.one_of(SPECIAL, st.just(T0.isoformat()), st.sampled_from(EDGES), ANY),
              "message_id": st.one_of(TEXT, ANY), "external_id": st.one_of(TEXT, ANY), "speaker": ANY,
              "tools_used": ANY, "metadata": ANY, "bogus": ANY}
    one = st.fixed_dictionaries({"role": fields["role"], "content": fields["content"]},
                                optional={k: v for k, v in fields.items() if k not in ("role", "content")})
    records = st.builds(NewMessage, role=fields["role"], content=fields["content"],
                        created_at=st.one_of(st.none(), st.sampled_from(EDGES), ANY), message_id=fields["message_id"],
                        external_id=fields["external_id"], speaker=ANY, tools_used=ANY, metadata=ANY,
                        kind=st.one_of(st.sampled_from(["turn", "note"]), ANY))
    return st.one_of(st.lists(st.one_of(one, records), max_size=4), ANY)


def options(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Some of the named keyword arguments, each plausible or anything. (An unknown keyword is a
    TypeError from Python itself, before the engine runs: the signature is the contract there.)"""
    return st.fixed_dictionaries({}, optional={k: st.one_of(v, ANY) for k, v in fields.items()})


# The engine and the check -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    home = tmp_path_factory.mktemp("fuzz") / "home"
    with ConversationEngine(home, embedder=real_embedder(), clock=lambda: T0 + timedelta(days=3)) as e:
        e.add_user("fuzzer")
        for user in USERS:
            e.add_user(user)
            e.ingest(user, [{"role": "user" if i % 2 == 0 else "assistant", "message_id": f"m-{user}-{i}",
                             "content": f"{user} talks about tea, gardens and the DuckDB store ({i})",
                             "created_at": (T0 + timedelta(minutes=7 * i)).isoformat()} for i in range(30)])
        e.end_conversation("alice")
        e.index()
        yield e
    print("\nfuzz cases per property: " + ", ".join(f"{k}={v}" for k, v in sorted(CASES.items())))


def check(name: str, call: Callable[[], object]) -> None:
    """The property: a result, or a ConvsearchError (with a code and a message); never anything else."""
    CASES[name] += 1
    try:
        call()
    except ConvsearchError as exc:
        assert exc.code and isinstance(exc.message, str) and exc.message
        assert 400 <= exc.http_status < 600


# Properties ---------------------------------------------------------------------------------------------
SEARCH_OPTIONS = dict(
    limit=INTS, mode=st.sampled_from(["hybrid", "lexical", "vector"]), fusion=st.sampled_from(["weighted", "rrf"]),
    day=SPECIAL, recency_days=st.one_of(INTS, FLOATS), start=SPECIAL, end=SPECIAL, min_score=FLOATS,
    kinds=st.lists(st.sampled_from(["summary", "message", "x"])), explain=st.booleans())


@FUZZ
@given(user=USER, query=st.one_of(TEXT, ANY), opts=options(**SEARCH_OPTIONS))
def test_search_anything(engine: ConversationEngine, user: Any, query: Any, opts: dict[str, Any]) -> None:
    check("search_anything", lambda: engine.search(user, query, **opts))


@settings(FUZZ, max_examples=200)
@given(user=st.sampled_from(USERS), query=TEXT, opts=st.fixed_dictionaries({}, optional=SEARCH_OPTIONS))
def test_search_real_user_any_text(engine: ConversationEngine, user: str, query: str, opts: dict[str, Any]) -> None:
    """A known user and a string query: the call reaches the tokenizer, the model and the ranking."""
    check("search_text", lambda: engine.search(user, query, **opts))


NAVIGATION: dict[str, Callable[[], st.SearchStrategy[Callable[[ConversationEngine, Any], object]]]] = {
    "get": lambda: st.builds(lambda o: lambda e, u: e.get(u, **o), options(
        message_id=TEXT, day_segment_id=TEXT, from_message_id=TEXT, to_message_id=TEXT)),
    "turns_since": lambda: st.builds(lambda t, o: lambda e, u: e.turns_since(u, t, **o), st.one_of(SPECIAL, ANY),
                                     options(include_summaries=st.booleans(), limit=INTS, from_seq=INTS,
                                             thread_id=TEXT)),
    "turns_around": lambda: st.builds(lambda t, o: lambda e, u: e.turns_around(u, t, **o), st.one_of(SPECIAL, ANY),
                                      options(count=INTS, before_ratio=FLOATS, thread_id=TEXT)),
    "conversation_context": lambda: st.builds(lambda t, o: lambda e, u: e.conversation_context(u, t, **o),
                                              st.one_of(INTS, ANY), options(thread_id=TEXT)),
    "messages_range": lambda: st.builds(lambda a, b, o: lambda e, u: e.messages_range(u, a, b, **o),
                                        st.one_of(INTS, ANY), st.one_of(INTS, ANY), options(thread_id=TEXT)),
    "substring_search": lambda: st.builds(lambda t, o: lambda e, u: e.substring_search(u, t, **o),
                                          st.one_of(TEXT, ANY), options(limit=INTS, thread_id=TEXT)),
    "summarize_range": lambda: st.builds(lambda a, b, o: lambda e, u: e.summarize_range(u, a, b, **o),
                                         st.one_of(INTS, ANY), st.one_of(INTS, ANY), options(thread_id=TEXT)),
    "list_conversations": lambda: st.builds(lambda n: lambda e, u: e.list_conversations(u, n), st.one_of(INTS, ANY)),
    "get_conversation": lambda: st.builds(lambda c: lambda e, u: e.get_conversation(u, c), st.one_of(TEXT, ANY)),
    "request_context_slice": lambda: st.builds(lambda a, b: lambda e, u: e.request_context_slice(u, a, b),
                                               st.one_of(INTS, ANY), st.one_of(INTS, ANY)),
    "assemble_context": lambda: st.builds(lambda n: lambda e, u: e.assemble_context(u, max_tokens=n),
                                          st.one_of(INTS, ANY)),
    "index_status": lambda: st.just(lambda e, u: e.index_status(u)),
    "stats": lambda: st.just(lambda e, u: e.stats(u)),
}


@pytest.mark.parametrize("name", sorted(NAVIGATION))
def test_reads(engine: ConversationEngine, name: str) -> None:
    @settings(FUZZ, max_examples=60)
    @given(call=NAVIGATION[name](), user=st.one_of(st.sampled_from(USERS), USER))
    def prop(call: Callable[[ConversationEngine, Any], object], user: Any) -> None:
        check(name, lambda: call(engine, user))

    prop()


@FUZZ
@given(user=USER, batch=messages(), opts=options(thread_id=TEXT, index=st.booleans()))
def test_ingest(engine: ConversationEngine, user: Any, batch: Any, opts: dict[str, Any]) -> None:
    check("ingest", lambda: engine.ingest(user, batch, **opts))


@settings(FUZZ, max_examples=50)
@given(contents=st.lists(TEXT, min_size=1, max_size=3), role=st.sampled_from(["user", "assistant", "tool"]),
       query=TEXT)
def test_ingest_any_text_then_search_it(engine: ConversationEngine, contents: list[str], role: str, query: str) -> None:
    """Well-formed messages with any text reach the chunker, BM25 and the model, then a search."""
    batch = [{"role": role, "content": c, "speaker": c[:20]} for c in contents]
    check("ingest_text", lambda: engine.ingest("fuzzer", batch, index=False))  # the query below embeds the text
    check("search_after_ingest", lambda: engine.search("fuzzer", query or "x"))
    check("search_own_text", lambda: engine.search("fuzzer", contents[0][:4000] or "x", mode="vector"))


@FUZZ
@given(user=st.one_of(TEXT, SCALAR),
       timezone_name=st.one_of(st.sampled_from(["UTC", "Europe/Paris", "Mars/Base"]), ANY),
       reason=ANY, ids=st.one_of(st.lists(TEXT, max_size=4), ANY), conversation=st.one_of(TEXT, ANY))
def test_users_and_deletion(engine: ConversationEngine, user: Any, timezone_name: Any, reason: Any, ids: Any,
                            conversation: Any) -> None:
    """Writes on scratch users (never alice or bob), and deletions of ids that are not theirs."""
    scratch = user if user not in (*USERS, "fuzzer") else "scratch"
    check("add_user", lambda: engine.add_user(scratch, timezone_name))
    check("end_conversation", lambda: engine.end_conversation(scratch, reason))
    check("delete_messages", lambda: engine.delete_messages(scratch, ids))
    check("delete_conversation", lambda: engine.delete_conversation(scratch, conversation))
    check("delete_user", lambda: engine.delete_user(scratch))
    for owner in USERS:  # another user's ids never reach alice's or bob's data
        assert engine.get(owner, message_id=f"m-{owner}-0").message_id == f"m-{owner}-0"


@settings(FUZZ, max_examples=40)
@given(fmt=st.one_of(st.sampled_from(FORMATS), ANY), content=st.one_of(TEXT, st.binary(max_size=200)),
       user=st.one_of(st.none(), TEXT), skip_bad=st.booleans())
def test_import_file(engine: ConversationEngine, tmp_path_factory: pytest.TempPathFactory, fmt: Any,
                     content: str | bytes, user: Any, skip_bad: bool) -> None:
    path = tmp_path_factory.mktemp("import") / "input"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass"))
    scratch = user if user not in (*USERS, "fuzzer") else None
    check("import_file", lambda: engine.import_file(path, fmt=fmt, user_id=scratch, skip_bad=skip_bad))
    check("import_missing_file", lambda: engine.import_file(Path(path.parent, "absent"), fmt=fmt))


# The HTTP API, fuzzed from its own OpenAPI document against a real uvicorn server -------------------------
@pytest.fixture(scope="module")
def base_url(engine: ConversationEngine) -> Iterator[str]:
    with live_server(engine) as url:
        yield url


@pytest.mark.parametrize("mode_name", ["positive", "negative"])
def test_http_api_never_answers_500(base_url: str, mode_name: str) -> None:
    """Every operation of /openapi.json, with bodies schemathesis generates (valid ones, then invalid
    ones), most of them for a user that exists: never a 5xx, always the JSON error shape."""
    if schemathesis is None:
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    mode = schemathesis.GenerationMode(mode_name)
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        if mode_name == "negative" and operation.label in ("GET /healthz", "POST /api/users/describe"):
            continue  # they take no input, so there is no invalid input to send
        @settings(FUZZ, max_examples=15)
        @given(case=operation.as_strategy(generation_mode=mode), user=st.sampled_from([None, *USERS]))
        def call(case: Any, user: str | None) -> None:
            if user is not None and isinstance(case.body, dict) and "user_id" in case.body:
                case.body["user_id"] = user  # reach past the user lookup
            CASES[f"http_{mode_name}"] += 1
            response = case.call(base_url=base_url, timeout=60)
            assert response.status_code < 500, (operation.label, case.body, response.text[:300])
            if response.status_code >= 400:
                assert set(response.json()["error"]) == {"code", "message"}

        call()
