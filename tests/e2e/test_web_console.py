"""`callgate console`: the web approval console against two real callgate servers (one per
"agent pod"), over real HTTP on loopback, and in a real headless browser (Playwright for
Python driving Debian's chromium; no browser is downloaded)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import httpx
import pytest

from callgate.cli.web_console import Target, bind
from callgate.cli.web_console import serve as serve_console
from callgate.v1 import tool_call_pb2 as cpb
from callgate.v1 import tool_service_pb2 as tpb
from tests.support.calls import invoke, open_session, prepare, run
from tests.support.server import Harness, serve

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@asynccontextmanager
async def console(*targets: tuple[str, Harness]) -> AsyncIterator[str]:
    """The console for `targets`, on a free loopback port; yields its URL."""
    sock = bind("127.0.0.1", 0)
    urls: list[str] = []
    listening = anyio.Event()
    stop = anyio.Event()

    def started(url: str) -> None:
        urls.append(url)
        listening.set()

    with anyio.fail_after(60):  # start, the test's own bounded waits, and the stop
        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(
                    serve_console,
                    [Target(name, h.tcp_target) for name, h in targets],
                    sock,
                    started=started,
                    stop=stop,
                )
            )
            await listening.wait()
            try:
                yield urls[0]
            finally:
                stop.set()


@asynccontextmanager
async def approver_page(
    url: str, token: str, *, refuse_previews: bool = False
) -> AsyncIterator[Page]:
    """Debian's chromium (headless) on the console at `url`, logged in with `token`; with
    `refuse_previews`, every fetch of a preview the console did not keep fails."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            if refuse_previews:
                await page.route("**/api/preview**", lambda route: route.abort())
            await page.goto(url)
            await page.get_by_test_id("token").fill(token)
            await page.get_by_test_id("login").click()
            yield page
        finally:
            await browser.close()


@asynccontextmanager
async def serve_callgate(path: Path) -> AsyncIterator[Harness]:
    """A callgate server (one "agent pod") with its workspace and state under `path`."""
    path.mkdir(exist_ok=True)
    async with serve(path) as harness:
        yield harness


@asynccontextmanager
async def two_pods(tmp_path: Path) -> AsyncIterator[tuple[Harness, Harness]]:
    async with (
        serve_callgate(tmp_path / "pod-a") as a,
        serve_callgate(tmp_path / "pod-b") as b,
    ):
        yield a, b


async def login(client: httpx.AsyncClient, url: str, token: str) -> str:
    """Log in; return the session's CSRF token."""
    response = await client.post(url + "login", data={"token": token}, headers={"Origin": url[:-1]})
    assert response.status_code == 303, response.text
    session = await client.get(url + "api/session")
    assert session.status_code == 200
    csrf = session.json()["csrf"]
    assert isinstance(csrf, str)
    return csrf


async def gated_write(harness: Harness, path: str, content: str) -> tuple[str, cpb.ToolCall]:
    stub = harness.stub()
    session_id = await open_session(stub)
    call = await prepare(
        stub, session_id, "WriteFile", {"path": path, "content": content}, evaluate=True
    )
    assert call.state == cpb.STATE_AWAITING_APPROVAL
    return session_id, call


async def state_of(harness: Harness, session_id: str, execution_id: str) -> int:
    got = await harness.stub().GetCall(
        tpb.GetCallRequest(session_id=session_id, execution_id=execution_id)
    )
    return got.call.state


async def test_the_event_stream_shows_each_pods_calls_with_their_server(tmp_path: Path) -> None:
    async with (
        two_pods(tmp_path) as (a, b),
        console(("pod-a", a), ("pod-b", b)) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        await gated_write(a, "from-a.txt", "A\n")
        await gated_write(b, "from-b.txt", "B\n")
        await login(client, url, a.tokens["approver"])  # both pods' approver tokens differ
        seen: dict[str, str] = {}
        async with client.stream("GET", url + "api/events") as events:
            with anyio.fail_after(10):
                async for line in events.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line.removeprefix("data: "))
                    if event["type"] == "target":
                        seen[event["target"]] = event["status"]
                    if event["type"] == "approval":
                        seen[event["call"]["summary"]] = event["target"]
                    if "WriteFile from-a.txt" in seen:
                        break
        assert seen["pod-a"] == "connected"
        assert seen["pod-b"] == "refused"  # pod-b has its own approver token
        assert seen["WriteFile from-a.txt"] == "pod-a"


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
async def test_the_console_in_a_browser_decides_for_two_pods(tmp_path: Path) -> None:
    """A pending write from each pod appears with its diff and server; approving one in the
    page lets that agent's Invoke run; denying the other with a note reaches its agent."""
    async with serve_callgate(tmp_path / "pod-a") as a:
        share_approver_token(tmp_path / "pod-b", a.tokens["approver"])
        async with serve_callgate(tmp_path / "pod-b") as b:
            await decide_in_browser(a, b)


def share_approver_token(pod: Path, token: str) -> None:
    """One approver for the fleet: the pod's generated approver token is `token`."""
    tokens = pod / "state" / "tokens"
    tokens.mkdir(parents=True, mode=0o700)
    (pod / "state").chmod(0o700)
    descriptor = os.open(tokens / "approver", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")


async def decide_in_browser(a: Harness, b: Harness) -> None:
    from playwright.async_api import async_playwright, expect

    if True:
        stub_a = a.stub()
        session_a = await open_session(stub_a)
        (a.workspace / "app.py").write_text("def main():\n    return 1\n")
        await run(stub_a, session_a, "ReadFile", {"path": "app.py"})
        write_a = await prepare(
            stub_a,
            session_a,
            "WriteFile",
            {"path": "app.py", "content": "def main():\n    return 2\n"},
            evaluate=True,
        )
        session_b, write_b = await gated_write(b, "deploy.sh", "#!/bin/sh\nrm -rf /srv/app\n")
        async with console(("pod-a", a), ("pod-b", b)) as url, async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                ],
            )
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                await page.goto(url)
                await page.get_by_test_id("token").fill(a.tokens["approver"])
                await page.get_by_test_id("login").click()
                card_a = page.locator(f'[data-execution-id="{write_a.execution_id}"]')
                card_b = page.locator(f'[data-execution-id="{write_b.execution_id}"]')
                await expect(card_a).to_be_visible(timeout=10_000)
                await expect(card_b).to_be_visible(timeout=10_000)
                await expect(card_a.get_by_test_id("server")).to_have_text("pod-a")
                await expect(card_b.get_by_test_id("server")).to_have_text("pod-b")
                await expect(card_a.locator("pre.preview span.del")).to_have_text("-    return 1")
                await expect(card_a.locator("pre.preview span.add")).to_have_text("+    return 2")
                await expect(card_b.get_by_test_id("preview")).to_contain_text("rm -rf /srv/app")
                if os.environ.get("CALLGATE_SCREENSHOTS"):
                    DOCS.mkdir(exist_ok=True)
                    await page.screenshot(path=str(DOCS / "console.png"), full_page=True)

                await card_a.get_by_test_id("approve-once").click()
                await expect(card_a).to_have_count(0, timeout=10_000)
                result = await invoke(stub_a, session_a, write_a.execution_id)
                assert not result.result.is_error
                assert (a.workspace / "app.py").read_text() == "def main():\n    return 2\n"

                await card_b.get_by_test_id("note").fill("not on a Friday")
                await card_b.get_by_test_id("deny").click()
                await expect(card_b).to_have_count(0, timeout=10_000)
                denied = await b.stub().GetCall(
                    tpb.GetCallRequest(session_id=session_b, execution_id=write_b.execution_id)
                )
                assert denied.call.state == cpb.STATE_DENIED
                assert "not on a Friday" in denied.call.denial.description
                assert not (b.workspace / "deploy.sh").exists()
            finally:
                await browser.close()


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
async def test_a_batch_is_decided_in_one_click_in_the_browser(tmp_path: Path) -> None:
    from playwright.async_api import expect

    async with serve_callgate(tmp_path / "pod") as pod:
        stub = pod.stub()
        session_id = await open_session(stub)
        calls = [
            await prepare(
                stub,
                session_id,
                "WriteFile",
                {"path": f"{name}.txt", "content": name},
                evaluate=True,
                batch_id="turn-42",
            )
            for name in ("one", "two", "three")
        ]
        async with console(("pod", pod)) as url, approver_page(url, pod.tokens["approver"]) as page:
            batch = page.locator('[data-batch-id="turn-42"]')
            await expect(batch.get_by_test_id("call")).to_have_count(3, timeout=10_000)
            if os.environ.get("CALLGATE_SCREENSHOTS"):
                await page.screenshot(path=str(DOCS / "console-batch.png"), full_page=True)
            await batch.get_by_test_id("approve-batch").click()
            await expect(batch).to_have_count(0, timeout=10_000)
        for call in calls:
            assert await state_of(pod, session_id, call.execution_id) == cpb.STATE_APPROVED
            assert not (await invoke(stub, session_id, call.execution_id)).result.is_error
        assert sorted(p.name for p in pod.workspace.iterdir()) == [
            "one.txt",
            "three.txt",
            "two.txt",
        ]


async def test_a_question_is_shown_and_answered_from_the_console(tmp_path: Path) -> None:
    async with (
        serve_callgate(tmp_path / "pod") as pod,
        console(("pod", pod)) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        stub = pod.stub()
        session_id = await open_session(stub)
        call = await prepare(
            stub,
            session_id,
            "AskUser",
            {"question": "Which branch?", "choices": ["main", "dev"]},
            evaluate=True,
        )
        csrf = await login(client, url, pod.tokens["approver"])
        results: list[tpb.InvokeResponse] = []

        async def ask() -> None:
            results.append(await invoke(stub, session_id, call.execution_id))

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            async with client.stream("GET", url + "api/events") as events:
                with anyio.fail_after(10):
                    async for line in events.aiter_lines():
                        if line.startswith("data: "):
                            event = json.loads(line.removeprefix("data: "))
                            if event["type"] == "question":
                                assert event["question"] == "Which branch?"
                                assert event["choices"] == ["main", "dev"]
                                assert event["target"] == "pod"
                                break
            answered = await client.post(
                url + "api/answer",
                json={"target": "pod", "execution_id": call.execution_id, "answer": "dev"},
                headers={"X-CSRF-Token": csrf},
            )
            assert answered.status_code == 200
        assert results[0].result.text.endswith("dev")


async def test_approve_all_approves_only_the_calls_the_box_showed(tmp_path: Path) -> None:
    """A batch box holds one session's calls; "approve all" sends exactly the calls it showed:
    a call that joined the batch after the box appeared, and another session's call naming
    the same batch_id, stay pending and are shown as cards of their own."""
    from playwright.async_api import expect

    async with serve_callgate(tmp_path / "pod") as pod:
        stub = pod.stub()
        mine, other = await open_session(stub), await open_session(stub)

        async def gated(session_id: str, name: str) -> cpb.ToolCall:
            call = await prepare(
                stub,
                session_id,
                "WriteFile",
                {"path": f"{name}.txt", "content": name},
                evaluate=True,
                batch_id="turn-7",
            )
            assert call.state == cpb.STATE_AWAITING_APPROVAL
            return call

        shown = [await gated(mine, name) for name in ("one", "two", "three")]
        stranger = await gated(other, "stranger")
        async with console(("pod", pod)) as url, approver_page(url, pod.tokens["approver"]) as page:
            batch = page.locator('[data-batch-id="turn-7"]')
            await expect(batch).to_have_count(1, timeout=10_000)
            await expect(batch.get_by_test_id("call")).to_have_count(3, timeout=10_000)
            # Settled (enabled): the box shows what it will decide; later calls stand apart.
            await expect(batch.get_by_test_id("approve-batch")).to_be_enabled(timeout=10_000)
            late = await gated(mine, "late")
            await expect(page.get_by_test_id("call")).to_have_count(5, timeout=10_000)
            await expect(batch.get_by_test_id("call")).to_have_count(3)
            await batch.get_by_test_id("approve-batch").click()
            await expect(page.get_by_test_id("call")).to_have_count(2, timeout=10_000)
        for call in shown:
            assert await state_of(pod, mine, call.execution_id) == cpb.STATE_APPROVED
        assert await state_of(pod, mine, late.execution_id) == cpb.STATE_AWAITING_APPROVAL
        assert await state_of(pod, other, stranger.execution_id) == cpb.STATE_AWAITING_APPROVAL


async def test_the_card_shows_the_rules_a_remembered_decision_saves(tmp_path: Path) -> None:
    """Next to "for session" and "always" the card lists the exact rules they save; "always"
    saves exactly those; a decision naming a rule that was not offered is refused (409,
    RULE_NOT_OFFERED) and saves nothing."""
    from playwright.async_api import expect

    from callgate.v1 import approval_service_pb2 as apb
    from tests.support.approvals import approver

    async with serve_callgate(tmp_path / "pod") as pod:
        stub = pod.stub()
        session_id = await open_session(stub)

        async def gated(command: str) -> cpb.ToolCall:
            call = await prepare(stub, session_id, "Bash", {"command": command}, evaluate=True)
            assert call.state == cpb.STATE_AWAITING_APPROVAL
            return call

        first = await gated("git log --oneline")
        async with console(("pod", pod)) as url:
            async with httpx.AsyncClient() as client:
                csrf = await login(client, url, pod.tokens["approver"])
                refused = await client.post(
                    url + "api/decide",
                    json={
                        "target": "pod",
                        "execution_id": first.execution_id,
                        "digest": first.digest,
                        "kind": "always",
                        "rules": [{"kind": "command.execute", "match": "Bash(git:*)"}],
                    },
                    headers={"X-CSRF-Token": csrf},
                )
                assert refused.status_code == 409
                assert refused.json()["reason"] == "RULE_NOT_OFFERED"
            listed = await approver(pod).ListRules(apb.ListRulesRequest())
            assert list(listed.rules) == []
            async with approver_page(url, pod.tokens["approver"]) as page:
                card = page.locator(f'[data-execution-id="{first.execution_id}"]')
                rules = card.get_by_test_id("rule")
                await expect(rules).to_have_count(2, timeout=10_000)
                shown = sorted(
                    [await rules.nth(i).get_attribute("data-match") or "" for i in range(2)]
                )
                assert shown == ["Bash(git log:*)", "git log --oneline"]
                await card.get_by_test_id("approve-always").click()
                await expect(card).to_have_count(0, timeout=10_000)
        listed = await approver(pod).ListRules(apb.ListRulesRequest())
        assert sorted(rule.match for rule in listed.rules) == shown


FLOOD = 1000
PREVIEW_BYTES = 60_000


async def test_the_console_holds_a_flood_of_pending_calls(tmp_path: Path) -> None:
    """1,000 pending writes with 60 KB previews: the page shows the first screenful with the
    count of all, more on request; the console keeps at most PREVIEWS_KEPT previews per
    server and sends the rest without their text, which a card fetches when it is shown
    (deciding waits for it); a decision on such a card works."""
    from playwright.async_api import expect

    from callgate.cli.web_console.fleet import PREVIEWS_KEPT

    async with serve_callgate(tmp_path / "pod") as pod:
        stub = pod.stub()
        sessions = [await open_session(stub) for _ in range(4)]
        calls: list[tuple[str, cpb.ToolCall]] = []

        async def agent(session_id: str, first: int) -> None:
            for number in range(first, FLOOD, len(sessions)):
                call = await prepare(
                    stub,
                    session_id,
                    "WriteFile",
                    {"path": f"f{number}.txt", "content": f"{number:05d}\n" * (PREVIEW_BYTES // 6)},
                    evaluate=True,
                )
                assert call.state == cpb.STATE_AWAITING_APPROVAL
                calls.append((session_id, call))

        async with anyio.create_task_group() as group:
            for index, session_id in enumerate(sessions):
                group.start_soon(agent, session_id, index)
        async with console(("pod", pod)) as url:
            async with httpx.AsyncClient() as client:
                await login(client, url, pod.tokens["approver"])
                lines = []
                async with client.stream("GET", url + "api/events") as events:
                    async for line in events.aiter_lines():
                        if line.startswith("data: "):
                            lines.append(json.loads(line[6:]))
                        approvals = [e for e in lines if e.get("type") == "approval"]
                        if len(approvals) == FLOOD:
                            break
            with_text = [e for e in approvals if e["call"]["preview"]["text"]]
            assert len(with_text) == PREVIEWS_KEPT
            assert all(e.get("preview_deferred") for e in approvals if e not in with_text)
            async with approver_page(url, pod.tokens["approver"]) as page:
                count = page.get_by_test_id("pending-count")
                await expect(count).to_have_text(f"{FLOOD} pending, 50 shown", timeout=30_000)
                await expect(page.get_by_test_id("call")).to_have_count(50)
                await page.get_by_test_id("show-more").click()
                await expect(page.get_by_test_id("call")).to_have_count(100, timeout=10_000)
                # Cards 65 and on hold no preview in the console: fetched when shown.
                last = page.get_by_test_id("call").nth(99)
                await expect(last.get_by_test_id("preview")).to_be_visible(timeout=10_000)
                await expect(last.get_by_test_id("approve-once")).to_be_enabled()
                execution_id = await last.get_attribute("data-execution-id")
                await last.get_by_test_id("approve-once").click()
                left = f"{FLOOD - 1} pending, 100 shown"
                await expect(count).to_have_text(left, timeout=10_000)
        decided = next(c for c in calls if c[1].execution_id == execution_id)
        assert await state_of(pod, decided[0], decided[1].execution_id) == cpb.STATE_APPROVED


async def test_approve_all_waits_for_every_members_fetched_preview(tmp_path: Path) -> None:
    """With previews the console did not keep (more than PREVIEWS_KEPT pending), a batch box
    cannot be approved while a member's preview has not been shown: here every fetch fails,
    and "approve all" stays disabled after the box has settled (deny stays possible)."""
    from playwright.async_api import expect

    from callgate.cli.web_console.fleet import PREVIEWS_KEPT

    async with serve_callgate(tmp_path / "pod") as pod:
        stub = pod.stub()
        filler, mine = await open_session(stub), await open_session(stub)
        for number in range(PREVIEWS_KEPT):
            arguments: dict[str, object] = {"path": f"f{number}.txt", "content": "x\n"}
            await prepare(stub, filler, "WriteFile", arguments, evaluate=True)
        batch = [
            await prepare(
                stub,
                mine,
                "WriteFile",
                {"path": f"b{number}.sh", "content": f"evil {number}\n"},
                evaluate=True,
                batch_id="turn-1",
            )
            for number in range(2)
        ]
        async with (
            console(("pod", pod)) as url,
            approver_page(url, pod.tokens["approver"], refuse_previews=True) as page,
        ):
            await page.get_by_test_id("show-more").click()
            box = page.locator('[data-batch-id="turn-1"]')
            await expect(box.get_by_test_id("call")).to_have_count(2, timeout=10_000)
            await expect(box.get_by_test_id("deny-batch")).to_be_enabled(timeout=10_000)
            await expect(box.get_by_test_id("approve-batch")).to_be_disabled()
        for call in batch:
            assert await state_of(pod, mine, call.execution_id) == cpb.STATE_AWAITING_APPROVAL


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
async def test_the_console_fits_a_phone_and_keeps_what_was_decided(tmp_path: Path) -> None:
    """At 360 px wide nothing overflows the page (a long path, a long line, the digest, the
    audit timeline); the deadline names its time zone; the audit trail is a timeline; a
    decided call stays listed with who decided it and how."""
    from playwright.async_api import async_playwright, expect

    async with serve_callgate(tmp_path / "pod") as pod:
        long_path = "src/" + "deeply_nested_directory_name/" * 3 + "module.py"
        content = "x = '" + "y" * 300 + "'\n"
        session_id, call = await gated_write(pod, long_path, content)
        async with console(("pod", pod)) as url, async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = await browser.new_page(viewport={"width": 360, "height": 800})
                await page.goto(url)
                await page.get_by_test_id("token").fill(pod.tokens["approver"])
                await page.get_by_test_id("login").click()
                card = page.locator(f'[data-execution-id="{call.execution_id}"]')
                await expect(card).to_be_visible(timeout=10_000)
                await card.get_by_test_id("audit").click()
                timeline = card.get_by_test_id("timeline-entry")
                await expect(timeline.first).to_be_visible(timeout=10_000)
                await expect(timeline.first).to_contain_text("call.prepared")
                meta = await card.locator(".meta").first.inner_text()
                assert re.search(r"decide by \d{1,2}:\d\d:\d\d\s?(AM|PM)?\s?[A-Z]{2,5}", meta), meta
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= 360, f"the page is {width} px wide at 360 px"
                if os.environ.get("CALLGATE_SCREENSHOTS"):
                    await page.screenshot(path=str(DOCS / "console-phone.png"), full_page=True)
                await card.get_by_test_id("approve-once").click()
                await expect(card).to_have_count(0, timeout=10_000)
                recent = page.get_by_test_id("recent-call")
                await expect(recent).to_have_count(1, timeout=10_000)
                await expect(recent).to_contain_text("decided by approver")
                await expect(recent).to_contain_text("approved")
                width = await page.evaluate("document.documentElement.scrollWidth")
                assert width <= 360, f"the page is {width} px wide at 360 px once decided"
            finally:
                await browser.close()
        assert await state_of(pod, session_id, call.execution_id) == cpb.STATE_APPROVED


@pytest.mark.skipif(os.geteuid() != 0, reason="overlay mounts need the server to run as root")
async def test_the_console_dry_runs_a_command_and_applies_exactly_its_changes(
    tmp_path: Path,
) -> None:
    """A gated command's card offers "Dry run"; its change set (the diff, the exit code, the
    output) comes back on the card, and "Apply exactly this" lands it without running the
    command again. Nothing reaches the workspace before."""
    from playwright.async_api import expect

    from tests.support.sandbox import bwrap_path

    if bwrap_path() is None:
        pytest.skip("bubblewrap does not work on this machine")
    pod_dir = tmp_path / "pod"
    pod_dir.mkdir()
    async with serve(pod_dir, sandbox="bwrap") as pod:
        (pod.workspace / "f.txt").write_text("red\n")
        stub = pod.stub()
        session_id = await open_session(stub)
        call = await prepare(
            stub,
            session_id,
            "Bash",
            {"command": "sed -i s/red/blue/ f.txt; echo done"},
            evaluate=True,
        )
        assert call.state == cpb.STATE_AWAITING_APPROVAL
        async with (
            console(("pod", pod)) as url,
            approver_page(url, pod.tokens["approver"]) as page,
        ):
            card = page.locator(f'[data-execution-id="{call.execution_id}"]')
            await card.get_by_test_id("dry-run").click(timeout=10_000)
            changes = card.get_by_test_id("change-set")
            await expect(changes).to_be_visible(timeout=30_000)
            await expect(card.get_by_test_id("change")).to_have_attribute("data-path", "f.txt")
            await expect(changes).to_contain_text("+blue")
            await expect(card.get_by_test_id("exit-code")).to_contain_text("Exit code 0")
            if os.environ.get("CALLGATE_SCREENSHOTS"):
                await page.screenshot(path=str(DOCS / "console-dry-run.png"), full_page=True)
            assert (pod.workspace / "f.txt").read_text() == "red\n"
            await card.get_by_test_id("apply").click()
            await expect(card).to_have_count(0, timeout=10_000)
        with anyio.fail_after(30):
            response = await invoke(stub, session_id, call.execution_id)
    assert "done" in response.result.text
    assert json.loads(response.result.json) == {"applied": ["f.txt"]}
    assert (pod.workspace / "f.txt").read_text() == "blue\n"
