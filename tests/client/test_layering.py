"""The client library stands alone: it never loads the server package."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_client_loads_no_server_module() -> None:
    """`import callgate.client` in a fresh interpreter leaves `callgate.server` unloaded."""
    probe = (
        "import sys, callgate.client\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('callgate.server'))\n"
        "print(','.join(loaded))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert completed.stdout.strip() == ""
