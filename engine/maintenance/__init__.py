"""Maintenance of a data directory: deletion that deletes, and `doctor` that checks and repairs what is derived."""
