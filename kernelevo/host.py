"""Facts of the machine and the install kernelevo runs from, needed by several rooms: the CPU's
model name (a CPU backend's device name, and a build time's context) and the pip command that adds
one of kernelevo's extras. Nothing here imports the rest of kernelevo."""
from __future__ import annotations

import shlex
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo; "" where it cannot be read (callers choose the fallback)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def install_extra(extra: str) -> str:
    """The pip command that adds one of kernelevo's extras (`embed`, `ray`) to this install: from
    the source checkout kernelevo runs from (editable), else from the package index."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        return f"pip install 'kernelevo[{extra}]'"
    where = "." if Path.cwd().resolve() == root else str(root)
    return f"pip install -e {shlex.quote(f'{where}[{extra}]')}"
