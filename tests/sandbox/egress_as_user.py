"""Run by test_egress.py as a user without privilege: a bubblewrap runner with the egress proxy
starts one command approved for one endpoint, and prints what happened as one JSON line. Exits 3
when bubblewrap does not work for this user here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio

from callgate.server.net.addresses import Endpoint
from callgate.server.net.egress import Allowance, EgressCall, EgressProxy, EgressSettings
from callgate.server.sandbox.bwrap import BwrapRunner
from tests.sandbox.helpers import finish, make_layout
from tests.support.egress import counting_server


def bubblewrap() -> str:
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    probe = subprocess.run(
        [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--", "/bin/true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        print(probe.stderr.strip())
        sys.exit(3)
    return bwrap


async def main(bwrap: str) -> None:
    layout = make_layout(Path(os.environ["EGRESS_BASE"]))
    proxy = EgressProxy(EgressSettings.build(["127.0.0.0/8"]))
    runner = BwrapRunner(bwrap, egress=proxy)
    try:
        with counting_server("approved") as approved, counting_server("other") as other:
            target = f"127.0.0.1:{approved.port}"
            command = (
                f"curl -sS -m 5 http://{target}/; curl -sS -m 5 http://127.0.0.1:{other.port}/; "
                f"(exec 3<>/dev/tcp/127.0.0.1/{approved.port}) 2>/dev/null && echo direct; true"
            )
            call = EgressCall("s", "x", (Allowance(Endpoint.parse(target), "test"),))
            running = await runner.start(layout.spec(command, egress=call))
            _, out = await finish(running)
            await running.terminate_tree(0)
            await running.aclose()
            accepted = [approved.accepted, other.accepted]
    finally:
        proxy.stop()
    print(json.dumps({"how": runner.listeners.how, "output": out.decode(), "accepted": accepted}))


anyio.run(main, bubblewrap())
