"""The distribution installs callgate.server, callgate.client and callgate.v1, and nothing bare."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_only_the_callgate_namespace(tmp_path: Path) -> None:
    """A built wheel holds callgate/{server,client,v1} and no top-level server/ or client/."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("callgate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("callgate-")}
    assert top == {"callgate"}
    for module in (
        "callgate/server/app.py",
        "callgate/client/__init__.py",
        "callgate/v1/tool_service_pb2.py",
        "callgate/v1/tool_service_pb2.pyi",
        # The web console serves its page from the package: nothing from elsewhere.
        "callgate/client/web_console/static/console.html",
        "callgate/client/web_console/static/console.js",
        "callgate/client/web_console/static/console.css",
        "callgate/client/web_console/static/login.html",
    ):
        assert module in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert (
        "callgate = callgate.server.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    )
