"""convsearch's engine: store, query layer and surfaces. `ConversationEngine` is the facade.

Imported lazily, so `import engine.errors` (or the indexers, which use the store) stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConversationEngine", "Settings"]


def __getattr__(name: str) -> Any:
    if name == "ConversationEngine":
        from engine.api import ConversationEngine

        return ConversationEngine
    if name == "Settings":
        from engine.config import Settings

        return Settings
    raise AttributeError(name)
