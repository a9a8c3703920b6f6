"""Fixtures for end-to-end tests: a real server per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.server import Harness, serve


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path) as running:
        yield running


@pytest.fixture
async def headless(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path, approval_mode="headless") as running:
        yield running
