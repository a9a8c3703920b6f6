"""How the web console holds a flood of pending calls.

A real callgate server (in this process, no sandbox, a temporary workspace) gets N gated
WriteFile calls with 60 KB previews from 4 agent sessions; then the console is served for it
and Debian's chromium (driven by Playwright, headless) logs in. Measured, in one run:
  (p) from the login click to the first screenful of cards shown with the count of all
      (target: at most 2 s with 1,000 calls);
  (d) from an "approve once" click on a card whose preview was fetched on demand to the
      count going down by one;
  (k) how many preview texts the console holds for the server (bounded by PREVIEWS_KEPT).

Usage: bench/console_flood.py [--calls N]
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final

import anyio
import httpx

from callgate.cli.web_console import Target, bind
from callgate.cli.web_console import serve as serve_console
from callgate.cli.web_console.fleet import PREVIEWS_KEPT
from callgate.client import CallgateClient, ClientSession, State
from callgate.server.app import App
from callgate.server.config import load_config

CHROMIUM: Final = "/usr/bin/chromium"
PREVIEW_BYTES: Final = 60_000
TARGET_SECONDS: Final = 2.0
SESSIONS: Final = 4


async def prepare_all(session: ClientSession, first: int, calls: int) -> None:
    for number in range(first, calls, SESSIONS):
        content = f"{number:05d}\n" * (PREVIEW_BYTES // 6)
        call = await session.prepare(
            "WriteFile", {"path": f"f{number}.txt", "content": content}, evaluate=True
        )
        if call.state is not State.AWAITING_APPROVAL:
            raise SystemExit(f"the write was not gated ({call.state})")


async def measure(root: Path, calls: int) -> tuple[float, float, int]:
    (root / "ws").mkdir()
    config = load_config(
        None,
        {
            "listen": [f"unix://{root}/s.sock"],
            "workspace": str(root / "ws"),
            "state_dir": str(root / "state"),
            "sandbox": "none",
        },
        environ={},
    )
    target = f"unix://{root}/s.sock"
    async with App(config).running() as running, AsyncExitStack() as stack:
        assert running.token_dir is not None
        agent = (running.token_dir / "agent").read_text().strip()
        approver = (running.token_dir / "approver").read_text().strip()
        client = await stack.enter_async_context(CallgateClient(target, token=agent))
        sessions = [await stack.enter_async_context(client.open_session()) for _ in range(4)]
        async with anyio.create_task_group() as group:
            for first, session in enumerate(sessions):
                group.start_soon(prepare_all, session, first, calls)
        urls: list[str] = []
        listening, stop = anyio.Event(), anyio.Event()

        def started(url: str) -> None:
            urls.append(url)
            listening.set()

        async with anyio.create_task_group() as group:
            group.start_soon(
                functools.partial(
                    serve_console,
                    [Target("pod", target)],
                    bind("127.0.0.1", 0),
                    started=started,
                    stop=stop,
                )
            )
            await listening.wait()
            url = urls[0]
            try:
                kept = await count_kept(url, approver, calls)
                first_screen, decided = await in_browser(url, approver, calls)
            finally:
                stop.set()
    return first_screen, decided, kept


async def in_browser(url: str, approver: str, calls: int) -> tuple[float, float]:
    """(p) and (d), in Debian's chromium."""
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page()
            await page.goto(url)
            await page.get_by_test_id("token").fill(approver)
            begin = time.perf_counter()
            await page.get_by_test_id("login").click()
            count = page.get_by_test_id("pending-count")
            await expect(count).to_have_text(f"{calls} pending, 50 shown", timeout=60_000)
            await expect(page.get_by_test_id("call")).to_have_count(50)
            first_screen = time.perf_counter() - begin
            await page.get_by_test_id("show-more").click()
            approve = page.get_by_test_id("call").nth(99).get_by_test_id("approve-once")
            await expect(approve).to_be_enabled(timeout=60_000)
            begin = time.perf_counter()
            await approve.click()
            left = f"{calls - 1} pending, 100 shown"
            await expect(count).to_have_text(left, timeout=60_000)
            return first_screen, time.perf_counter() - begin
        finally:
            await browser.close()


async def count_kept(url: str, token: str, calls: int) -> int:
    """Preview texts the console holds (what its event stream sends with text)."""
    async with httpx.AsyncClient() as client:
        await client.post(url + "login", data={"token": token}, headers={"Origin": url[:-1]})
        seen = 0
        kept = 0
        async with client.stream("GET", url + "api/events") as events:
            async for line in events.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event.get("type") != "approval":
                    continue
                seen += 1
                kept += bool(event["call"]["preview"]["text"])
                if seen == calls:
                    return kept
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cgflood", dir="/tmp"))
    try:
        first, decided, kept = anyio.run(measure, root, args.calls)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    verdict = "PASS" if first <= TARGET_SECONDS else "FAIL"
    print(f"Console flood: {args.calls} pending WriteFile calls, 60 KB previews\n")
    print("| measure | value | target | result |")
    print("|---|---:|---:|---|")
    bounded = "PASS" if kept <= PREVIEWS_KEPT else "FAIL"
    print(
        f"| (p) login click to the first screenful | {first:.2f} s "
        f"| ≤ {TARGET_SECONDS:g} s | {verdict} |"
    )
    print(f"| (d) approve once, its preview fetched on demand | {decided:.2f} s | — | — |")
    print(f"| (k) preview texts the console holds | {kept} | ≤ {PREVIEWS_KEPT} | {bounded} |")


if __name__ == "__main__":
    main()
