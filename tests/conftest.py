import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One build cache for the session: candidates compiled once are reused, as in real use."""
    path = tmp_path_factory.mktemp("kernelevo-cache")
    os.environ["KERNELEVO_CACHE_DIR"] = str(path)
    return path


@pytest.fixture
def server():
    """A scripted LLM server on 127.0.0.1 speaking the OpenAI and Anthropic protocols (llm_server.py)."""
    from llm_server import ScriptedServer

    s = ScriptedServer()
    yield s
    s.close()


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    exe = shutil.which("kernelevo", path=str(Path(sys.executable).parent)) or shutil.which("kernelevo")
    assert exe, "kernelevo is not installed (pip install -e .)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
