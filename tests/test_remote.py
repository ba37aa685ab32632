"""RemoteEngine, the facade's calls over HTTP: the same signatures, and nothing silently dropped."""

from __future__ import annotations

import inspect
from datetime import datetime, timezone

import pytest

from engine.api import ConversationEngine
from engine.errors import InvalidInputError, ServerUnavailableError
from engine.models import NewMessage
from engine.surfaces.remote import RemoteEngine


def _shared_calls() -> list[str]:
    return sorted(name for name in vars(RemoteEngine) if name in vars(ConversationEngine)
                  and callable(vars(RemoteEngine)[name]) and (not name.startswith("_") or name in ("__enter__", "__exit__")))


def test_the_remote_client_offers_the_facades_calls_with_the_same_signatures():
    """RemoteEngine stands in for ConversationEngine beside a server: each call it offers takes the
    same parameters (names, kinds, defaults, types); only the results differ (JSON, not records)."""
    shared = _shared_calls()
    assert {"search", "get", "ingest", "turns_since", "turns_around", "substring_search", "delete"} <= set(shared)
    differ = {}
    for name in shared:
        facade = inspect.signature(getattr(ConversationEngine, name), eval_str=True).parameters
        remote = inspect.signature(getattr(RemoteEngine, name), eval_str=True).parameters
        if list(facade.values()) != list(remote.values()):
            differ[name] = (str(inspect.signature(getattr(ConversationEngine, name))),
                            str(inspect.signature(getattr(RemoteEngine, name))))
    assert not differ, differ


def test_the_remote_client_refuses_what_the_http_api_cannot_carry():
    """A facade option the HTTP API does not take is an error before any request, never dropped."""
    with RemoteEngine("http://127.0.0.1:9") as remote:  # nothing listens there: no call may reach it
        with pytest.raises(InvalidInputError, match="mode is not offered over HTTP"):
            remote.search("alice", "tea", mode="lexical")
        with pytest.raises(InvalidInputError, match="now is not offered over HTTP"):
            remote.finalize_days(now=datetime(2024, 1, 1, tzinfo=timezone.utc))
        with pytest.raises(InvalidInputError, match="only turns"):
            remote.ingest("alice", [NewMessage(role="system", content="day summary updated", kind="note")])
        with pytest.raises(ServerUnavailableError):  # the same call without the option does go out
            remote.search("alice", "tea")
