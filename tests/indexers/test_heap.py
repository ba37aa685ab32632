"""release_free_memory finds glibc's malloc_trim where the interpreter runs on glibc, and runs."""

from __future__ import annotations

import platform

import pytest

from indexers.heap import _malloc_trim, release_free_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_on_glibc() -> None:
    trim = _malloc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)  # 1: memory was released, 0: there was none to release
    release_free_memory()
