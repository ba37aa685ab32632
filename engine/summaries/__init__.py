"""Summaries: when days and conversations are summarised (the policy) and who writes them (the summarizers)."""
