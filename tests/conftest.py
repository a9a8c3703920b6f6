"""Shared fixtures: every async test runs on plain asyncio (grpc.aio needs it)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
