"""The distribution installs callgate.server, .client, .cli and .v1, and nothing bare."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_only_the_callgate_namespace(tmp_path: Path) -> None:
    """A built wheel holds callgate/{server,client,cli,v1} and no bare server/, client/, cli/."""
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
        "callgate/cli/main.py",
        "callgate/v1/tool_service_pb2.py",
        "callgate/v1/tool_service_pb2.pyi",
        # The web console serves its page from the package: nothing from elsewhere.
        "callgate/cli/web_console/static/console.html",
        "callgate/cli/web_console/static/console.js",
        "callgate/cli/web_console/static/console.css",
        "callgate/cli/web_console/static/login.html",
    ):
        assert module in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "callgate = callgate.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
