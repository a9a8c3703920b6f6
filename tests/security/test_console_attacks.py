"""Attacks on the web console from a browser's seat: a page of another origin posting a
decision (CSRF, with and without the cookie), a form post, DNS rebinding, an agent token at the
login, and what the pages let scripts and frames do."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from callgate.v1 import tool_call_pb2 as cpb
from tests.e2e.test_web_console import (
    CHROMIUM,
    console,
    gated_write,
    login,
    serve_callgate,
    state_of,
)

pytestmark = pytest.mark.anyio


async def test_pages_are_locked_down_and_login_needs_an_approver_token(tmp_path: Path) -> None:
    async with (
        serve_callgate(tmp_path / "pod") as pod,
        console(("pod", pod)) as url,
        httpx.AsyncClient(follow_redirects=False) as client,
    ):
        page = await client.get(url)
        assert page.status_code == 200
        assert 'name="token"' in page.text  # the login page, nothing else
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store"
        assert "http://" not in page.text.replace(url, "")  # no CDN, no remote asset
        assert (await client.get(url + "api/session")).status_code == 401
        assert (await client.get(url + "api/events")).status_code == 401

        refused = await client.post(
            url + "login", data={"token": pod.tokens["agent"]}, headers={"Origin": url[:-1]}
        )
        assert refused.status_code == 401
        assert "approver or admin token" in refused.text
        assert "set-cookie" not in refused.headers
        foreign = await client.post(
            url + "login",
            data={"token": pod.tokens["approver"]},
            headers={"Origin": "http://evil.example"},
        )
        assert foreign.status_code == 403
        rebinding = await client.get(url, headers={"Host": "evil.example:80"})
        assert rebinding.status_code == 421

        ok = await client.post(
            url + "login", data={"token": pod.tokens["approver"]}, headers={"Origin": url[:-1]}
        )
        assert ok.status_code == 303
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith("callgate_console=")
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert pod.tokens["approver"] not in cookie
        assert 'src="/static/console.js"' in (await client.get(url)).text


async def test_a_decision_without_the_cookie_or_with_a_bad_csrf_token_changes_nothing(
    tmp_path: Path,
) -> None:
    async with (
        serve_callgate(tmp_path / "pod") as pod,
        console(("pod", pod)) as url,
        httpx.AsyncClient() as client,
    ):
        session_id, call = await gated_write(pod, "a.txt", "hello")
        csrf = await login(client, url, pod.tokens["approver"])
        body = {
            "target": "pod",
            "execution_id": call.execution_id,
            "digest": call.digest,
            "kind": "once",
        }
        async with httpx.AsyncClient() as stranger:  # no cookie
            response = await stranger.post(
                url + "api/decide", json=body, headers={"X-CSRF-Token": csrf}
            )
            assert response.status_code == 401
        for headers in ({}, {"X-CSRF-Token": "wrong"}, {"X-CSRF-Token": csrf[:-1]}):
            response = await client.post(url + "api/decide", json=body, headers=headers)
            assert response.status_code == 403
            assert "CSRF" in response.json()["error"]
        cross = await client.post(
            url + "api/decide",
            json=body,
            headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        form = await client.post(
            url + "api/decide",
            content="kind=once",
            headers={"X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert form.status_code == 415
        assert await state_of(pod, session_id, call.execution_id) == cpb.STATE_AWAITING_APPROVAL

        stale = await client.post(
            url + "api/decide", json={**body, "digest": "0" * 64}, headers={"X-CSRF-Token": csrf}
        )
        assert stale.status_code == 409
        assert stale.json()["reason"] == "DIGEST_MISMATCH"
        done = await client.post(url + "api/decide", json=body, headers={"X-CSRF-Token": csrf})
        assert done.status_code == 200
        assert done.json()["call"]["state"] == "approved"
        audit = await client.get(
            url + "api/audit", params={"target": "pod", "execution_id": call.execution_id}
        )
        kinds = [event["kind"] for event in audit.json()["events"]]
        assert "call.prepared" in kinds


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
async def test_agent_text_is_never_markup_in_the_page(tmp_path: Path) -> None:
    """A file name and content built to inject script (tags, handlers, a bidi override) are
    shown as text: no dialog opens, no element of the agent's is created."""
    from playwright.async_api import async_playwright, expect

    payload = '<img src=x onerror="alert(1)"><script>alert(2)</script>\u202e'
    async with serve_callgate(tmp_path / "pod") as pod:
        _, call = await gated_write(pod, "x<svg onload=alert(3)>.txt", payload + "\n")
        async with console(("pod", pod)) as url, async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = await browser.new_page()
                dialogs: list[str] = []
                page.on("dialog", lambda dialog: dialogs.append(dialog.message))
                await page.goto(url)
                await page.get_by_test_id("token").fill(pod.tokens["approver"])
                await page.get_by_test_id("login").click()
                card = page.locator(f'[data-execution-id="{call.execution_id}"]')
                await expect(card.get_by_test_id("preview")).to_contain_text(
                    '<img src=x onerror="alert(1)"><script>alert(2)</script>\\u202e'
                )
                await expect(card.locator("h3")).to_contain_text("<svg onload=alert(3)>")
                assert await page.locator("img, script:not([src]), svg").count() == 0
                assert dialogs == []
            finally:
                await browser.close()
