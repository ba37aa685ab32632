"""One error contract on every surface: each class of engine/errors.py reaches an HTTP client, an MCP
client and a shell with the same code (HTTP: its status and `{"error": {"code", "message"}}`; MCP: a
tool error `code: message`; CLI: its family's exit code and `convsearch: error [code]: ...` on stderr).

The table walks every class the module exports, so a new error class is checked without editing this
file. The facade's `get` is made to raise each class (the surfaces' mapping is what is under test);
the last tests trigger real errors end to end, without any stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from engine import errors
from engine.api import ConversationEngine
from engine.surfaces.cli import main
from engine.config import Settings
from engine.surfaces.mcp.server import build_server
from tests.support import live_server

CLI_DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md"
CLASSES = [error for error in (getattr(errors, name) for name in errors.__all__) if isinstance(error, type)]
EXIT_CODES = {  # docs/reference/cli.md lists the same table
    "ConvsearchError": 2, "InvalidInputError": 3, "NotFoundError": 4, "IndexStateError": 5, "StoreLockedError": 6,
    "EmbeddingUnavailableError": 7, "AuthError": 8, "SummarizerError": 9, "SettingsError": 10, "StorageFullError": 11,
    "ServerUnavailableError": 12,
}


def _family_exit(cls: type[errors.ConvsearchError]) -> int:
    """The exit code of the nearest class in EXIT_CODES up the hierarchy."""
    return next(EXIT_CODES[base.__name__] for base in cls.__mro__ if base.__name__ in EXIT_CODES)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConversationEngine]:
    with ConversationEngine(tmp_path_factory.mktemp("errors") / "home", embedder=None) as e:
        e.add_user("alice")
        yield e


@pytest.fixture(scope="module")
def base_url(engine: ConversationEngine) -> Iterator[str]:
    with live_server(engine) as url:
        yield url


def _surfaces(engine: ConversationEngine, base_url: str, cli_home: Path,
              capsys: pytest.CaptureFixture[str]) -> tuple[tuple[int, dict], str, tuple[int, str]]:
    """One `get` of message 'm1' for alice through HTTP, MCP and the CLI: what each client sees."""
    response = httpx.post(f"{base_url}/api/conversation/get", json={"user_id": "alice", "message_id": "m1"},
                          timeout=30)
    result = anyio.run(build_server(engine, "alice").call_tool, "conversation_get", {"message_id": "m1"})
    assert result.is_error and len(result.content) == 1, result
    ConversationEngine(cli_home, embedder=None).close()  # the CLI's store exists: `get` is what fails
    status = main(["--home", str(cli_home), "get", "--user", "alice", "--message", "m1"])
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured
    return (response.status_code, response.json()), result.content[0].text, (status, captured.err)


def test_every_class_has_a_distinct_code_and_an_exit_code() -> None:
    assert len({cls.code for cls in CLASSES}) == len(CLASSES)
    assert all(_family_exit(cls) == cls.exit_code for cls in CLASSES)
    assert {cls.__name__ for cls in CLASSES} >= set(EXIT_CODES)
    rows = {line.split("|")[1].strip(): line for line in CLI_DOC.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    for cls in CLASSES:  # the documented table says the same
        assert f"`{cls.code}`" in rows[str(cls.exit_code)], cls.__name__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_class_maps_to_the_same_code_everywhere(
        cls: type[errors.ConvsearchError], engine: ConversationEngine, base_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def raise_it(*args: object, **kwargs: object) -> None:
        raise cls("what went wrong; what to do instead")

    monkeypatch.setattr(ConversationEngine, "get", raise_it)
    monkeypatch.setenv("CONVSEARCH_EMBEDDING_BACKEND", "none")
    (status, body), tool_error, (exit_code, stderr) = _surfaces(engine, base_url, tmp_path / "cli", capsys)
    assert (status, body) == (cls.http_status, {"error": {"code": cls.code,
                                                          "message": "what went wrong; what to do instead"}})
    assert tool_error == f"{cls.code}: what went wrong; what to do instead"  # the code first (docs/reference/mcp.md)
    assert exit_code == _family_exit(cls)
    assert stderr == f"convsearch: error [{cls.code}]: what went wrong; what to do instead\n"


def test_a_real_unknown_message_is_the_same_error_everywhere(
        engine: ConversationEngine, base_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CONVSEARCH_EMBEDDING_BACKEND", "none")
    with ConversationEngine(tmp_path / "cli", embedder=None) as other:
        other.add_user("alice")
    (status, body), tool_error, (exit_code, stderr) = _surfaces(engine, base_url, tmp_path / "cli", capsys)
    assert status == 404 and body["error"]["code"] == "unknown_message" and "'m1'" in body["error"]["message"]
    assert tool_error.startswith("unknown_message: ") and "'m1'" in tool_error
    assert exit_code == 4 and stderr.startswith("convsearch: error [unknown_message]: ") and "'m1'" in stderr


@pytest.mark.parametrize("env, words", [
    ({"CONVSEARCH_VECTOR_WIEGHT": "0.1"}, "unknown setting CONVSEARCH_VECTOR_WIEGHT: did you mean "
                                          "CONVSEARCH_VECTOR_WEIGHT?"),
    ({"CONVSEARCH_VECTOR_WEIGHT": "0", "CONVSEARCH_LEXICAL_WEIGHT": "0"}, "both 0"),
    ({"CONVSEARCH_HNSW_M": "2"}, "setting hnsw_m: Input should be greater than or equal to 4"),
])
def test_a_bad_setting_in_the_environment_exits_10_naming_it(
        env: dict[str, str], words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    ConversationEngine(tmp_path / "home", embedder=None).close()  # a store: the settings are what is wrong
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["--home", str(tmp_path / "home"), "stats"]) == 10
    err = capsys.readouterr().err
    assert err.startswith("convsearch: error [invalid_setting]: ") and words in err


def test_settings_refuse_unknown_keywords_and_zero_weights_but_keep_non_setting_variables(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(errors.SettingsError, match=r"unknown setting vector_wieght: did you mean vector_weight\?"):
        Settings(vector_wieght=0.1)  # type: ignore[call-arg]
    with pytest.raises(errors.SettingsError, match="vector_weight and lexical_weight are both 0"):
        Settings(vector_weight=0, lexical_weight=0)
    assert Settings(vector_weight=0).lexical_weight == 0.3  # one of them at 0 is a valid ablation
    monkeypatch.setenv("CONVSEARCH_HOME", str(tmp_path))
    monkeypatch.setenv("CONVSEARCH_VECTOR_WEIGHT", "0.5")
    assert Settings().vector_weight == 0.5
