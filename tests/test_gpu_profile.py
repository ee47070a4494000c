"""The profiling bar on a GPU: `kernelevo evaluate --profile` on every starter task's honest nvrtc
candidate, and on the copy task's inline one (nvcc's resource report): the profile names the
dominant kernel, its registers and spills, and a % of speed of light in a plausible range."""
import json
import os
from pathlib import Path

import pytest
from kernelevo.agent.profile_block import profile_block
from kernelevo.judge.measure import ncu
from kernelevo.evaluation import Evaluation

from conftest import ROOT, run_cli

pytestmark = pytest.mark.gpu
TASKS = ROOT / "benchmarks" / "tasks"
CASES = [(p, TASKS / "candidates" / f"{p.stem}__nvrtc.py") for p in sorted(TASKS.glob("*.py"))]
CASES.append((TASKS / "device_copy.py", TASKS / "candidates" / "device_copy__inline.py"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")  # one calibration for all of them


@pytest.mark.parametrize("task,candidate", CASES, ids=lambda p: p.stem)
def test_profile_of_honest_candidate(task, candidate, cache):
    out = run_cli("evaluate", str(task), str(candidate), "--profile", "--json", "--no-compile-baseline",
                  "--cache-dir", str(cache))
    assert out.returncode == 0, out.stderr[-2000:]
    evaluation = Evaluation.from_dict(json.loads(out.stdout))
    if os.environ.get("OUT"):  # the profiles travel back for the record
        with open(Path(os.environ["OUT"]) / "profiles.jsonl", "a") as f:
            f.write(json.dumps({"candidate": candidate.name, "evaluation": evaluation.to_dict()}) + "\n")
    assert evaluation.ok, evaluation.message
    p = evaluation.profile
    top = p.candidate[0]
    assert top.own and top.share > 0.5 and top.registers, top  # the candidate's own kernel dominates
    used = [r for r in p.resources if r.name in top.name]
    assert used and used[0].registers > 0 and used[0].spill_stores >= 0, p.resources
    assert used[0].compiler == ("nvcc" if candidate.stem.endswith("inline") else "nvrtc")  # ptxas reported
    assert p.reference and p.reference_ms > 0
    low = 70 if task.stem == "device_copy" else 1
    assert low <= p.sol.candidate_pct <= 110, p.sol
    assert 0 < p.sol.reference_pct <= 110, p.sol
    if evaluation.confinement and not evaluation.confinement.unconfined:
        assert not p.ncu and any(n.startswith("Nsight Compute skipped: ncu cannot profile inside") for n in p.notes)
    elif ncu.find():
        assert p.ncu and p.ncu[0].dram > 0 and p.ncu[0].stalls, p.notes
    block = profile_block(p)
    assert top.name in block and "Speed of light" in block and "registers" in block
