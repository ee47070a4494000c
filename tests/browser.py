"""Headless Chromium for the tests: load a local HTML file, let its scripts run, return the DOM.

The network is cut off inside the browser (every host name fails to resolve), so a page that
works here works on an offline GPU server.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT = 120
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm, which crashes the renderer
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


def chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None when there is none."""
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def required() -> bool:
    """Whether a browser test can run: True with chromium; without it False, or a test failure
    where KERNELEVO_REQUIRE_BROWSER=1 (CI), so a missing browser cannot pass for a checked page."""
    if chromium() is not None:
        return True
    if os.environ.get("KERNELEVO_REQUIRE_BROWSER") == "1":
        import pytest

        pytest.fail("chromium is required (install Debian's chromium)")
    return False


def load(html: Path, screenshot: Path | None = None, width: int = 1400, height: int = 5000) -> str:
    """The DOM of `html` after its scripts ran; with `screenshot`, also a PNG of the page there."""
    url = Path(html).resolve().as_uri()
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", url]).stdout
    if not dom.strip():
        raise RuntimeError(f"chromium printed no DOM for {url}")
    if screenshot is not None:
        target = Path(screenshot).resolve()
        target.unlink(missing_ok=True)
        _run(["--virtual-time-budget=5000", "--hide-scrollbars", f"--screenshot={target}",
              f"--window-size={width},{height}", url])
        if not target.is_file():
            raise RuntimeError(f"chromium wrote no screenshot at {target}")
    return dom


def _run(args: list[str]) -> subprocess.CompletedProcess:
    exe = chromium()
    if exe is None:
        raise RuntimeError("no chromium found (install Debian's chromium)")
    # a fresh profile each time: no state from an earlier run (or a user's browser) leaks in
    with tempfile.TemporaryDirectory(prefix="kernelevo-chromium-") as profile:
        cmd = [exe, *FLAGS, f"--user-data-dir={profile}", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"chromium took over {TIMEOUT} s: {_text(e.stderr)[-4000:]}") from e
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-4000:]}")
    return done


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")
