"""Where the search stops for the speed of light: a task whose torch.compile is already near the bound
leaves nothing for a kernel to win, and a kernel near the bound, ahead of the baseline, is done.
Pure functions of the opponent measured before the first call (agent.prompting.Opponent)."""
from __future__ import annotations

COMPILER_NEAR = 1.2  # torch.compile within this factor of the bound: ask for --force before spending calls
AT_BOUND = 1.1  # a best kernel within this factor of the bound, ahead of the baseline, ends the search


def left_to_compiler(opponent) -> str:
    """Why a search would spend its calls for nothing ('' when it would not): torch.compile, the
    baseline, already runs within COMPILER_NEAR of the reference's speed of light."""
    if opponent is None or opponent.baseline != "compile" or not opponent.bound_ms or opponent.compiled_ms is None:
        return ""
    if opponent.compiled_ms > COMPILER_NEAR * opponent.bound_ms:
        return ""
    return (f"left to the compiler: torch.compile takes {opponent.compiled_ms:.4f} ms, within {COMPILER_NEAR}x of "
            f"the speed of light ({opponent.bound_ms:.4f} ms); nothing was spent. --force searches anyway")


def at_bound(member, bound_ms: float | None) -> str:
    """'at the bound: ...' when `member` (the best) beats its baseline beyond noise and its device time is
    within AT_BOUND of the speed of light, else ''."""
    if member is None or not bound_ms or not member.ms or member.ms > AT_BOUND * bound_ms:
        return ""
    ahead = member.fitness_ci[0] > 1.0 if member.fitness_ci else member.fitness > 1.0
    if not ahead:
        return ""
    return (f"at the bound: kernel {member.kernel_id} takes {member.ms:.4f} ms, within {AT_BOUND}x of the speed of "
            f"light ({bound_ms:.4f} ms)")
