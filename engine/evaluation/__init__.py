"""Retrieval evaluation: pure metrics (`metrics`) and the LoCoMo harness (`locomo`)."""

from __future__ import annotations

__all__ = ["metrics", "locomo"]
