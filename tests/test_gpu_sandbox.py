"""The candidate's sandbox on a GPU: an inline candidate whose host C++ hides its environment, file and
socket calls, and a Triton candidate that reaches `os` and the C library through modules it may import,
each judged through the CLI with fake keys in its environment. Run on the GPU machine: pytest -m gpu."""
import pytest

from conftest import FIXTURES
from test_sandbox import reach

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("fixture", ["reach_inline.py", "reach_triton.py", "reach_c.py"])
def test_a_gpu_candidate_that_hides_its_reach_takes_nothing(tmp_path, fixture):
    verdict, listener, leaked = reach(FIXTURES / "sandbox" / fixture, tmp_path,
                                      "cpu" if fixture.endswith("_c.py") else "cuda")
    assert not verdict["confinement"]["files"].startswith("unconfined"), verdict["confinement"]
    assert not verdict["confinement"]["network"].startswith("unconfined"), verdict["confinement"]
    assert not leaked, f"a key reached {leaked}"
    assert not listener.received, listener.received
    assert (verdict["verdict"], verdict["reason"]) == ("rejected", "io_access"), (verdict["message"], verdict["excerpt"])
    assert {r["call"] for r in verdict["evidence"]["refused"]} >= {"socket", "open"}
    assert verdict["evidence"]["verdict_before"] == "ok", verdict["evidence"]
