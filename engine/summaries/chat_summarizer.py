"""The optional summarizer: any OpenAI-compatible chat-completions server, one request per call.

It fills the same Markdown template as the extractive summarizer, so stored summaries look alike
whichever wrote them; a failure is a SummarizerError the summary policy retries later.
"""

from __future__ import annotations

import logging
import re
from datetime import timezone
from typing import Sequence

import httpx

from engine.errors import SummarizerError
from engine.models import Message
from engine.summaries.summarizers import Summarizer, clamp_title, speaker_label

__all__ = ["OpenAICompatibleSummarizer"]

log = logging.getLogger("convsearch.summarize")
log.addHandler(logging.NullHandler())

# Prompts ---------------------------------------------------------------------------
SUMMARY_PROMPT = (
    "Summarise the conversation below in Markdown with exactly these five headings, in this order: "
    "## Summary (2-3 plain sentences), ## Goals, ## Decisions, ## Open loops, ## Next steps. Under each "
    "of the last four, write short bullets starting with '- ' naming who said it; write '- none noted' "
    "when a section is empty. Use only facts from the conversation, never quote tool output at length, "
    "and answer in the conversation's language."
)
TITLE_PROMPT = (
    "Give a title of 5 to 8 words naming the main topic of the conversation below. "
    "Answer with the title only, no quotes, no trailing punctuation."
)
MAX_PROMPT_MESSAGE_CHARS = 2000


def _transcript(messages: Sequence[Message]) -> str:
    """One line a turn, stamped in UTC and saying so (the summarizer does not know the user's zone;
    an unmarked time would be read as local)."""
    lines = []
    for m in messages:
        if m.kind != "turn":
            continue
        text = m.content
        if len(text) > MAX_PROMPT_MESSAGE_CHARS:  # tool dumps and pasted logs: head and tail only
            half = MAX_PROMPT_MESSAGE_CHARS // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"
        lines.append(f"[{m.created_at.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC] {speaker_label(m)}: {text}")
    return "\n".join(lines)


class OpenAICompatibleSummarizer:
    """Chat-completions client (`POST {url}/chat/completions`); one request per call, temperature 0."""

    def __init__(self, url: str, model: str, timeout: float = 30.0, *, fallback: Summarizer | None = None) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.fallback = fallback  # only used when explicitly given

    def summarize(self, messages: Sequence[Message]) -> str:
        try:
            return self._complete(SUMMARY_PROMPT, _transcript(messages)).strip() + "\n"
        except SummarizerError:
            if self.fallback is None:
                raise
            log.warning("summarize.fallback backend=extractive url=%s", self.url)
            return self.fallback.summarize(messages)

    def title(self, messages: Sequence[Message]) -> str:
        try:
            text = self._complete(TITLE_PROMPT, _transcript(messages))
        except SummarizerError:
            if self.fallback is None:
                raise
            return self.fallback.title(messages)
        text = re.sub(r"^\s*title\s*:\s*", "", text.strip().splitlines()[0] if text.strip() else "", flags=re.I)
        return clamp_title(text)

    def _complete(self, instruction: str, transcript: str) -> str:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "system", "content": instruction}, {"role": "user", "content": transcript}],
        }
        endpoint = f"{self.url}/chat/completions"
        try:
            response = httpx.post(endpoint, json=body, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise SummarizerError(
                f"cannot reach the summarizer at {endpoint} ({type(exc).__name__}: {exc}): start the server, fix "
                "CONVSEARCH_LLM_URL, or set CONVSEARCH_SUMMARIZER=extractive"
            ) from None
        if response.status_code >= 400:
            raise SummarizerError(
                f"the summarizer at {endpoint} answered HTTP {response.status_code}: {response.text[:200]!r}; "
                "check CONVSEARCH_LLM_MODEL and the server's log, or set CONVSEARCH_SUMMARIZER=extractive"
            )
        return _content_of(response, endpoint)


def _content_of(response: httpx.Response, endpoint: str) -> str:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        content = None
    if not isinstance(content, str) or not content.strip():
        raise SummarizerError(
            f"the summarizer at {endpoint} answered without choices[0].message.content: "
            f"{response.text[:200]!r}; is it an OpenAI-compatible chat-completions server?"
        )
    return content
