"""The store: DuckDB tables for users, threads, messages, days, conversations and summaries, and the SQL over them.

Messages are the source of truth; everything else in convsearch is derived from what this package holds.
"""
