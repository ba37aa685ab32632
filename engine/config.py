"""One settings class for the whole engine (env prefix CONVSEARCH_), and the data directory."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.errors import ConvsearchError, SettingsError
from engine.timeutil import zone

__all__ = ["Settings", "data_dir", "default", "ENV_PREFIX", "NON_SETTING_ENV"]

ENV_PREFIX = "CONVSEARCH_"
# Variables with the prefix that are not settings: the data directory and the test suite's data path.
NON_SETTING_ENV = frozenset({"CONVSEARCH_HOME", "CONVSEARCH_LOCOMO_DEV"})


def data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the store and indexes live: the argument, else $CONVSEARCH_HOME, else ./.convsearch."""
    if explicit is not None:
        return Path(explicit)
    return Path(os.environ.get("CONVSEARCH_HOME") or ".convsearch")


class Settings(BaseSettings):
    """Every tunable of the engine, each overridable as CONVSEARCH_<NAME>."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    def __init__(self, **values: Any) -> None:
        """As pydantic's, but an unknown or bad setting raises SettingsError naming it (a misspelled
        name would otherwise be ignored and the default used without a word)."""
        unknown = _unknown_env_names()
        if unknown:
            raise SettingsError("; ".join(_suggest(name, prefix=ENV_PREFIX) for name in unknown))
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(_describe(exc)) from exc

    # Store
    default_timezone: str = Field("UTC", description="Time zone of users created without one (IANA name).")
    idle_timeout_minutes: float = Field(30.0, gt=0, description="Silence that ends a conversation.")
    future_tolerance_hours: float = Field(
        24.0, ge=0, le=24 * 366,
        description="How far ahead of now a message's created_at may be (clock skew); later is refused, since "
        "it would put every following message of the thread out of order.",
    )
    clock_skew_seconds: float = Field(
        300.0, ge=0, le=24 * 3600,
        description="A message at most this much older than the one before it in its thread (two writers whose "
        "clocks are a little apart: a phone a minute fast, then the agent's server) is stored at that message's "
        "time, so the thread stays in time order; older is refused (0 refuses any).",
    )
    max_conversations_retained: int | None = Field(
        None, ge=1, description="Keep only this many ended conversations per thread (off by default)."
    )

    # Chunking
    window_tokens: int = Field(
        96, ge=32, le=254,
        description="Word pieces per window (MiniLM reads 256 with its 2 special tokens). 96 (~2 turns) "
        "cites the right turn more often than 160 on LoCoMo dev: docs/benchmarks.md.",
    )
    overlap_messages: int = Field(1, ge=0, le=8, description="Messages shared by consecutive windows.")
    tool_output_cap_tokens: int = Field(
        96, ge=16, description="Tool outputs longer than this keep head and tail with a placeholder between in the "
        "context payload (the index holds them whole, in pieces)."
    )

    # Embeddings
    embedding_backend: Literal["torch", "onnx", "none"] = Field(
        "onnx",
        description="'onnx' (all-MiniLM-L6-v2 int8: cosine 0.999 to torch, loads in ~1 s), 'torch' "
        "(sentence-transformers) or 'none' (lexical only). Indexes must be rebuilt when it changes.",
    )
    embedding_model: Literal["all-MiniLM-L6-v2", "all-mpnet-base-v2"] = Field(
        "all-MiniLM-L6-v2",
        description="'all-MiniLM-L6-v2' (shipped) or 'all-mpnet-base-v2' (torch backend; install it with `make "
        "model-mpnet`): more recall on LoCoMo dev, a query ~4-5x slower and indexing ~6x (docs/benchmarks.md). "
        "Indexes must be rebuilt when it changes.",
    )
    embedding_timeout_s: float = Field(
        5.0, gt=0, description="A query embedding slower than this falls back to lexical search."
    )
    embed_batch_size: int = Field(32, ge=1, description="Texts per embedding batch.")
    query_model: Literal["int8", "same"] = Field(
        "int8",
        description="With the onnx backend, 'int8' embeds queries with an int8 copy of the model (weights and "
        "activations; derived once into model_cache_dir): ~2 ms faster a search, LoCoMo recall unchanged "
        "(docs/benchmarks.md). 'same' uses the documents' model.",
    )
    model_cache_dir: Path | None = Field(
        None, description="Where the int8 query model and joined split models are kept (default: "
        "$XDG_CACHE_HOME/convsearch, ~/.cache/convsearch)."
    )
    blas_threads: int = Field(
        1, ge=0, description="Threads NumPy's BLAS may use in the engine's process (0: as the host set it). "
        "A search's matrix products are small: a second BLAS thread only spins against the query embedding and "
        "other requests (100k search e2e p50 36.6 -> 15.1 ms under load, docs/benchmarks.md).",
    )

    # BM25
    bm25_k1: float = Field(1.5, gt=0, description="BM25 term-frequency saturation.")
    bm25_b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation.")
    stemming: bool = Field(True, description="Stem English tokens (PyStemmer) for BM25.")
    stopwords: bool = Field(True, description="Drop English and French stop words for BM25.")

    # HNSW
    hnsw_m: int = Field(16, ge=4, le=96, description="Graph degree: more is better recall, more memory.")
    hnsw_ef_construction: int = Field(100, ge=16, description="Build-time beam: slower build, better graph "
                                      "(100k: 200 gave the same recall@10 for 80% more build CPU).")
    hnsw_ef: int = Field(192, ge=10, description="Query-time beam (>= k): higher is better recall, slower. "
                         "192: faiss's float16 graph finds at 192 what hnswlib's did at 128, for the same time.")

    # Ranking
    vector_weight: float = Field(0.7, ge=0, le=1, description="Weight of the vector score in the hybrid.")
    lexical_weight: float = Field(0.3, ge=0, le=1, description="Weight of the normalised lexical score.")
    fusion: Literal["weighted", "rrf"] = Field("weighted", description="Score fusion: weighted sum or RRF.")
    rrf_k: int = Field(60, ge=1, description="RRF constant.")
    message_own_weight: float = Field(
        0.5, ge=0, le=1,
        description="Weight of a message's own match against its best window's score (the window lends "
        "context: a reply shares few words with the question it answers). docs/benchmarks.md.",
    )
    summary_context_weight: float = Field(
        0.25, ge=0, le=1,
        description="Weight of the score of the summary covering a message in that message's score "
        "(0 turns it off; messages no summary covers are unaffected). docs/benchmarks.md.",
    )
    message_context_cap: float = Field(
        2.0, gt=0,
        description="A message's window and summary count at most this many times its own match: context "
        "re-orders messages that match, it never lifts one whose own line matches nothing. docs/benchmarks.md.",
    )
    other_speaker_weight: float = Field(
        0.77, gt=0, le=1,
        description="When the query names a participant (\"what did Caroline research\"), the turns of the "
        "others weigh this much (1 turns it off). docs/benchmarks.md.",
    )
    reply_lift: float = Field(
        0.9, ge=0, le=1,
        description="A turn scores at least this fraction of the turn right before it: the reply after a strong "
        "match is often the evidence (0 turns it off). docs/benchmarks.md.",
    )
    neighbour_windows: bool = Field(
        True,
        description="The windows beside the best ones (holding the turn right before or after them) are "
        "candidates and opened into messages too: the lifts between turns can only lift a candidate. "
        "docs/benchmarks.md.",
    )
    reacted_to_lift: float = Field(
        0.85, ge=0, le=1,
        description="A turn scores at least this fraction of its reply, the turn right after it: the strong match "
        "is often the other speaker's reaction (\"Adoption agencies? Wonderful!\"), the evidence the turn it reacts "
        "to (0 turns it off). docs/benchmarks.md.",
    )
    phrase_weight: float = Field(
        1.0, ge=0,
        description="A turn's own keyword match counts the query's word pairs it holds side by side this much "
        "(as much again as the two words' weight at 1; 0 turns it off). docs/benchmarks.md.",
    )
    question_turn_weight: float = Field(
        0.7, gt=0, le=1,
        description="When the query asks a question, a turn that asks one weighs this much, by the share of it "
        "that asks: the turn most like a question is often the same question, the answer a statement (1 turns "
        "it off). docs/benchmarks.md.",
    )
    question_reply_lift: float = Field(
        1.0, ge=0, le=1,
        description="When the query asks a question, the reply to a turn that ends with a question scores at "
        "least this fraction of it, when higher than reply_lift (0 turns it off). docs/benchmarks.md.",
    )
    dates_as_keywords: bool = Field(
        False,
        description="A date the query names (\"since March 2024\") is also matched as keywords. Off, its words "
        "leave the keyword query (unless nothing else is left) and its turns rank by their days "
        "(outside_time_weight): a turn that merely mentions \"4 March\" is no match. docs/benchmarks.md.",
    )
    outside_time_weight: float = Field(
        0.7, gt=0, le=1,
        description="When the query names a date (\"in May 2023\", \"on 3 June, 2023\", \"in July\"), the turns "
        "of other days weigh this much (1 turns it off). docs/benchmarks.md.",
    )
    summary_lead_margin: float = Field(
        2.0, ge=1,
        description="A summary leads only when it scores at least this many times the best message: a leading "
        "summary takes a message's place (chosen by leave-one-conversation-out on LoCoMo dev, docs/benchmarks.md).",
    )
    covered_penalty: float = Field(0.85, gt=0, le=1, description="Multiplier for messages covered by a summary.")
    max_summary_results: int = Field(
        1, ge=0,
        description="Summaries shown at most ahead of messages (each must outscore the best message). "
        "docs/benchmarks.md.",
    )
    candidate_depth: int = Field(50, ge=10, description="Minimum candidates taken from each list before fusion.")

    # Summaries and context
    summarizer: Literal["extractive", "openai", "none"] = Field("extractive", description="Summarizer backend.")
    llm_url: str | None = Field(None, description="OpenAI-compatible chat-completions base URL.")
    llm_model: str | None = Field(None, description="Model name for the chat-completions server.")
    day_summary_every: int = Field(10, ge=1, description="Update a day's summary after this many new messages.")
    day_token_budget: int = Field(4000, ge=100, description="Raw tokens of a day before its summary updates.")
    summary_workers: int | None = Field(
        None, ge=0, le=32,
        description="Processes that make extractive summaries beside the engine's own on large batches (bulk "
        "ingest, import, backfill) while the engine indexes; by default as many as the cores, at most 4 (none on "
        "one core); 0: the engine's process alone.",
    )
    index_workers: int | None = Field(
        None, ge=0, le=32,
        description="Processes that chunk and tokenize a long thread (10,000 messages or more: an import's first "
        "index, a reindex) beside the engine's own; by default one fewer than the cores, at most 3; 0: the "
        "engine's process alone. The windows are the same either way.",
    )
    finalize_every_minutes: float = Field(
        60.0, ge=0, description="`serve` runs the scheduled close (idle conversations end, days that are over "
        "get their final summary) this often; 0 turns it off (then run `convsearch summarize --finalize` from cron).")
    conversation_max_context_tokens: int = Field(
        8500, ge=200, description="The model context a default context payload is fitted into, reserved tokens "
        "included: the payload's budget is this minus conversation_reserved_tokens (4000 by default).",
    )
    conversation_reserved_tokens: int = Field(
        4500, ge=0, description="Tokens of conversation_max_context_tokens kept free for the system prompt and the "
        "answer (apply_context_window's reserved_tokens).",
    )
    conversation_max_history_messages: int = Field(
        200, ge=2, description="Most messages of the day (or slice) a context payload holds: the first and the "
        "most recent ones; the others are dropped behind the truncation marker.",
    )

    # Surfaces
    api_token: str | None = Field(None, description="Bearer token required by every HTTP route but /healthz.")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Largest HTTP request body accepted.")
    user_tokens: dict[str, str] = Field(
        default_factory=dict,
        description="Bearer tokens bound to one user each, as JSON {\"token\": \"user_id\"}: such a token opens "
        "MCP sessions (over /mcp) for that user only. The api_token is the admin token: it names the user of an "
        "MCP session in the X-Convsearch-User header.",
    )
    max_import_bytes: int = Field(4 * 1024**3, ge=1024, description="Largest file `convsearch ingest` uploads "
                                  "to a running server.")
    index_interval_s: float = Field(
        5.0, gt=0, description="How often `serve` embeds messages still without vectors and saves changed "
        "index shards (a restart then replays at most this much from the store and the embedding cache).",
    )

    def shown(self) -> dict[str, Any]:
        """The settings as a page may show them: tokens only as whether (and how many are) set, and a
        URL's user and password masked, so seeing the settings never hands out a way in."""
        values = self.model_dump()
        values["api_token"] = "set" if self.api_token else "not set"
        values["user_tokens"] = f"{len(self.user_tokens)} set" if self.user_tokens else "none set"
        values["llm_url"] = _without_credentials(self.llm_url)
        return values

    @model_validator(mode="after")
    def _context_budget_positive(self) -> Settings:
        if self.conversation_max_context_tokens - self.conversation_reserved_tokens < 100:
            raise ValueError(
                f"conversation_max_context_tokens ({self.conversation_max_context_tokens}) leaves fewer than 100 "
                f"tokens after conversation_reserved_tokens ({self.conversation_reserved_tokens}): raise the first "
                "or lower the second")
        return self

    @model_validator(mode="after")
    def _default_timezone_known(self) -> Settings:
        try:
            zone(self.default_timezone)
        except ConvsearchError as exc:  # else every user added without a zone fails, the setting unnamed
            raise ValueError(f"default_timezone: {exc.message}") from None
        return self

    @model_validator(mode="after")
    def _model_on_its_backend(self) -> Settings:
        if self.embedding_model != "all-MiniLM-L6-v2" and self.embedding_backend == "onnx":
            raise ValueError(f"embedding_model {self.embedding_model} runs on the torch backend only: set "
                             "embedding_backend to 'torch' (CONVSEARCH_EMBEDDING_BACKEND=torch)")
        return self

    @model_validator(mode="after")
    def _fusion_weights_not_both_zero(self) -> Settings:
        if self.vector_weight == 0 and self.lexical_weight == 0:
            raise ValueError("vector_weight and lexical_weight are both 0: every hybrid score would be 0/0; "
                             "set at least one above 0 (defaults 0.7 and 0.3)")
        return self


def _without_credentials(url: str | None) -> str | None:
    """`url` with any user:password@ part replaced by `***@`."""
    if url is None:
        return None
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def _unknown_env_names() -> list[str]:
    """CONVSEARCH_* variables that name no setting (and are not one of NON_SETTING_ENV)."""
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
    return sorted(name for name in os.environ
                  if name.upper().startswith(ENV_PREFIX) and name.upper() not in known | NON_SETTING_ENV)


def _suggest(name: str, *, prefix: str = "") -> str:
    """'unknown setting X' with the closest real name, if one is close."""
    names = [prefix + field.upper() if prefix else field for field in Settings.model_fields]
    close = difflib.get_close_matches(name.upper() if prefix else name, names, n=1)
    hint = f": did you mean {close[0]}?" if close else "; the settings are the fields of engine.config.Settings"
    return f"unknown setting {name}{hint}"


def _describe(exc: ValidationError) -> str:
    """One line per bad setting, naming it and saying what is expected."""
    lines = []
    for error in exc.errors():
        name = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            lines.append(_suggest(name))
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            lines.append(f"setting {name}: {message}" if name else f"settings: {message}")
    return "; ".join(lines)


def default(name: str) -> Any:
    """A setting's default: the indexers' parameter classes take theirs from here, so each default
    is written once (in Settings, beside its description)."""
    return Settings.model_fields[name].default
