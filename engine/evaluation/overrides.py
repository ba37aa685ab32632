"""What a ranking experiment may change, kept out of the production search signature.

Only the evaluation harness (engine/evaluation/, benchmarks/, the CLI's `eval`) builds a
`RankingOverrides` and hands it to `ConversationEngine.search_experiment`; the surfaces that
serve users may not import this module (tests/test_architecture.py), so no request can reach
an ablation switch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from engine.config import Settings
from engine.errors import InvalidInputError

__all__ = ["RankingOverrides", "NO_OVERRIDES"]


@dataclass(frozen=True)
class RankingOverrides:
    """Ablation switches and replaced ranking settings for one experiment's searches."""

    penalty: bool = True  # off: messages a summary covers are not down-weighted
    summary_context: bool = True  # off: a message's score ignores the summary covering it
    settings: Mapping[str, Any] = field(default_factory=dict)  # Settings fields replaced, e.g. {"reply_lift": 0.9}

    def applied_to(self, settings: Settings) -> Settings:
        """`settings` with this experiment's values, validated as Settings validates any value."""
        if not self.settings:
            return settings
        unknown = sorted(set(self.settings) - set(Settings.model_fields))
        if unknown:
            raise InvalidInputError(f"unknown settings {unknown}: name fields of engine.config.Settings")
        return Settings.model_validate({**settings.model_dump(), **self.settings})


NO_OVERRIDES = RankingOverrides()  # production ranking
