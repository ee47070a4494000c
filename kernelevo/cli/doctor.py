"""`kernelevo doctor`: what this machine offers, each finding with what to do if it is missing."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from kernelevo.host import install_extra

API_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
NCU_PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute")


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def mask(value: str) -> str:
    if value.startswith("http"):
        return value
    return f"{value[:3]}…{value[-4:]}" if len(value) > 12 else "set (short)"


def _gpus() -> dict:
    try:
        import torch
    except ImportError:
        return {"ok": False, "detail": "torch is not installed", "fix": "pip install torch"}
    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if not torch.cuda.is_available():
        return {**info, "ok": False, "detail": "no CUDA device visible to torch",
                "fix": "install a CUDA build of torch and the NVIDIA driver, or use --device cpu"}
    devices = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append(f"cuda:{i} {p.name} (sm_{p.major}{p.minor}, {p.total_memory / 2**30:.0f} GiB, "
                       f"{p.multi_processor_count} SMs)")
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {**info, "ok": True, "detail": "; ".join(devices), "driver": (driver or "?").splitlines()[0]}


def _nvrtc() -> dict:
    try:
        from kernelevo.runtime import nvrtc_version

        return {"ok": True, "detail": f"NVRTC {nvrtc_version()} (cuda-python)"}
    except Exception as exc:  # noqa: BLE001 - any failure here is a finding
        return {"ok": False, "detail": f"{type(exc).__name__}: {exc}",
                "fix": "pip install cuda-python nvidia-cuda-nvrtc (use the CUDA major version of your driver)"}


def _tool(name: str, version_args: list[str], fix: str, places: tuple[str, ...] = (), line: int = 0) -> dict:
    path = shutil.which(name) or next((p for p in places if os.path.exists(p)), None)
    if path is None:
        return {"ok": False, "detail": "not found", "fix": fix}
    if os.path.isdir(path):
        return {"ok": True, "detail": path}
    version = _run([path, *version_args]) or ""
    return {"ok": True, "detail": f"{path}  {version.splitlines()[line] if version else ''}".strip()}


def _embedder(model_name: str | None) -> dict:
    from kernelevo.evolution.novelty import SentenceEmbedder, default_embedder

    embedder = default_embedder(model_name)
    return {"ok": isinstance(embedder, SentenceEmbedder), "detail": f"{embedder.name}: {embedder.why}",
            "fix": f"optional: {install_extra('embed')} and cache the model once with network"}


def _ray(address: str | None) -> dict:
    """Ray, and the cluster at `address` (else $RAY_ADDRESS): its nodes and their GPUs."""
    try:
        import ray
    except ImportError:
        return {"ok": False, "detail": "not installed",
                "fix": f"optional: {install_extra('ray')} to judge on a Ray cluster (--executor ray)"}
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        return {"ok": True, "detail": f"ray {ray.__version__}; no cluster named (--ray-address or RAY_ADDRESS)"}
    from kernelevo.judge.api import ray_connect, ray_nodes

    try:
        ray_connect(address)
        nodes = ray_nodes()
    except RuntimeError as exc:
        return {"ok": False, "detail": str(exc), "fix": "start the cluster (ray start --head) or fix the address"}
    described = "; ".join(f"{n['host']} ({n['cpus']} CPUs, {n['gpus']} GPUs{' ' + n['gpu_model'] if n['gpus'] else ''})"
                          for n in nodes)
    gpus = sum(n["gpus"] for n in nodes)
    return {"ok": True, "detail": f"ray {ray.__version__} at {address}: {len(nodes)} nodes, {gpus} GPUs: {described}",
            "nodes": nodes}


def _sandbox() -> dict:
    """What confines a candidate's process here, tried for real: a write outside its folders and a
    connect to 127.0.0.1 from a process confined as a judge worker is."""
    import tempfile

    from kernelevo.judge.api import BUILDS, COMPARED, sandbox_probe

    with tempfile.TemporaryDirectory(prefix="kernelevo-doctor-") as folder:
        found = sandbox_probe(Path(folder))
    confinement = found["confinement"]
    escaped = [what for what, did in (("a write outside its folders", found["wrote_outside"]),
                                      ("a connect to 127.0.0.1", found["connected"])) if did]
    tried = f"; got through: {', '.join(escaped)}" if escaped else \
        "; a write outside its folders and a connect to 127.0.0.1 were refused"
    confinement = dataclasses.replace(confinement, comparison=COMPARED, builds=BUILDS)
    return {"ok": not confinement.unconfined and not escaped,
            "detail": f"{confinement.summary()}{tried}; outputs compared {COMPARED}; builds {BUILDS}",
            "parts": dataclasses.asdict(confinement),
            "fix": "a Linux kernel with Landlock (5.13 or later; 6.7 for its TCP rules) and seccomp: elsewhere "
                   "candidates run unconfined, and every verdict says so"}


def _bounds() -> dict:
    """The memory checkers of the judge's bounds trial (judge/run/bounds.py)."""
    from kernelevo.judge.api import bounds_checkers

    found = bounds_checkers()
    detail = "; ".join(f"{kind}: {path or 'none'}" for kind, path in (("GPU compute-sanitizer", found["cuda"]),
                                                                       ("CPU AddressSanitizer", found["cpu"])))
    detail += f"; {found['launcher']}"
    return {"ok": bool(found["cuda"] or found["cpu"]), "detail": detail,
            "fix": "optional: the CUDA toolkit's compute-sanitizer, or gcc's libasan, for the bounds trial "
                   "(without them final verdicts say indices were not checked)"}


def collect(embed_model: str | None = None, ray_address: str | None = None) -> dict:
    keys = {k: (mask(os.environ[k]) if os.environ.get(k) else None) for k in API_KEYS}
    return {
        "gpu": _gpus(),
        "nvrtc": _nvrtc(),
        "nvcc": _tool("nvcc", ["--version"], "install the CUDA toolkit (needed for the inline format)", line=-1),
        "ncu": _tool("ncu", ["--version"], "install Nsight Compute for hardware profiles (optional)", NCU_PLACES,
                     line=-1),
        "c_compiler": _tool("cc", ["--version"], "install gcc (needed for the CPU backend)"),
        "bounds_checkers": _bounds(),
        "ninja": _tool("ninja", ["--version"], "pip install ninja (needed for the inline format)"),
        "embedder": _embedder(embed_model),
        "ray": _ray(ray_address),
        "sandbox": _sandbox(),
        "api_keys": {"ok": any(v for k, v in keys.items() if k.endswith("KEY")), "detail": keys,
                     "fix": "export OPENAI_API_KEY or ANTHROPIC_API_KEY (kernelevo optimize needs one)"},
    }


def print_findings(findings: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for name, f in findings.items():
        mark = "[green]ok[/green]" if f.get("ok") else "[yellow]--[/yellow]"
        detail = f["detail"]
        if isinstance(detail, dict):
            detail = ", ".join(f"{k}={v or 'unset'}" for k, v in detail.items())
        detail = escape(str(detail))  # findings are plain text: `kernelevo[embed]` is not a rich tag
        if name == "gpu" and "torch" in f:
            detail = f"{detail}  [dim](torch {f['torch']}, CUDA {f['torch_cuda']}, driver {f.get('driver', '?')})[/dim]"
        if not f.get("ok") and f.get("fix"):
            detail = f"{detail}  [dim]→ {escape(f['fix'])}[/dim]"
        table.add_row(mark, name, detail)
    Console().print(table)
