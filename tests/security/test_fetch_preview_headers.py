"""Fetch previews show what the request sends: header values, escaped, so
that a POST carrying `X-HTTP-Method-Override: DELETE` is seen as what it is; credentials only
by their scheme (or the cookies' names) and a keyed fingerprint, so the approver sees that a
credential is sent, and which, while neither the preview's holders nor the journal learn it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.calls import open_session, prepare
from tests.support.server import Harness, serve

pytestmark = pytest.mark.anyio

TOKEN = "Bearer tok-SECRET-1234567890"


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    async with serve(tmp_path) as running:
        yield running


async def _preview(harness: Harness, session: str, headers: dict[str, str]) -> str:
    call = await prepare(
        harness.stub(),
        session,
        "Fetch",
        {"url": "https://api.example.com/items", "method": "POST", "headers": headers},
    )
    return call.preview.text


def _fingerprint(text: str, name: str) -> str:
    found = re.search(rf"{name}: .* \[value not shown; fingerprint ([0-9a-f]{{12}})\]", text)
    assert found is not None, text
    return found.group(1)


async def test_a_header_value_that_changes_the_request_is_shown(harness: Harness) -> None:
    """The method override travels with the POST, and the approver reads it, escaped."""
    session = await open_session(harness.stub())
    text = await _preview(
        harness,
        session,
        {"X-HTTP-Method-Override": "DELETE", "X-Note": "a\u202eb\u200bc"},
    )
    assert "\n  X-HTTP-Method-Override: DELETE\n" in text
    assert "\u202e" not in text
    assert "\u200b" not in text


async def test_credentials_show_their_scheme_and_fingerprint_never_their_value(
    harness: Harness,
) -> None:
    """Authorization and Cookie show a scheme (or cookie names) and a
    fingerprint: the same credential the same fingerprint, another one another; no value
    reaches the preview or the journal."""
    session = await open_session(harness.stub())
    first = await _preview(
        harness,
        session,
        {
            "Authorization": TOKEN,
            "Cookie": "sid=COOKIESECRET; theme=dark",
        },
    )
    again = await _preview(harness, session, {"Authorization": TOKEN})
    other = await _preview(harness, session, {"Authorization": TOKEN + "x"})
    assert "Authorization: Bearer …" in first
    assert "Cookie: cookies sid, theme" in first
    for shown in ("tok-SECRET", "COOKIESECRET"):
        assert shown not in first
    assert _fingerprint(first, "Authorization") == _fingerprint(again, "Authorization")
    assert _fingerprint(first, "Authorization") != _fingerprint(other, "Authorization")
    # Every loop has a Fetch of its own (tools are built per loop): the key stays the server's,
    # so an approver can tell the same credential in another session too.
    elsewhere = await _preview(
        harness, await open_session(harness.stub()), {"Authorization": TOKEN}
    )
    assert _fingerprint(first, "Authorization") == _fingerprint(elsewhere, "Authorization")
    await harness.app.lifecycle.journal.commit()
    for path in harness.state_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (b"tok-SECRET", b"COOKIESECRET", b"X-HTTP-Method-Override"):
                assert secret not in data, path
