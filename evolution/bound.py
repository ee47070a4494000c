"""Where the search stops for the speed of light: a task whose torch.compile is already near the bound
leaves nothing for a kernel to win, a kernel near the bound, ahead of the baseline, is done, and so is a
search whose best kernel and baseline both run near the floor of any kernel (the bytes moved once).
A bound that a measured time beats by more than the calibration's spread is wrong, and decides nothing.
Pure functions of the opponent measured before the first call (agent.prompting.Opponent)."""
from __future__ import annotations

COMPILER_NEAR = 1.2  # torch.compile within this factor of the bound: ask for --force before spending calls
AT_BOUND = 1.1  # a best kernel within this factor of the bound, ahead of the baseline, ends the search
# The calibration's own spread: a time this far under the estimated bound is within its error (a copy ran at
# 107 % of its bound). Further under it, the estimate is wrong (the data stays in cache, or the calibrated peak
# is low: it varied by a third between two H100 hosts), and it neither stops nor gates a search.
SPREAD = 0.10


def unreliable(bound_ms: float | None, measured: dict[str, float | None]) -> str:
    """Why the speed-of-light estimate `bound_ms` is wrong ('' when no measurement says so): the first of
    `measured` (what ran -> ms per forward) faster than it by more than SPREAD."""
    if not bound_ms:
        return ""
    for who, ms in measured.items():
        if ms and ms * (1 + SPREAD) < bound_ms:
            return (f"{who} ran in {ms:.4f} ms, under the estimated speed of light ({bound_ms:.4f} ms) by more than "
                    f"the calibration's spread ({SPREAD:.0%}): the estimate is wrong here")
    return ""


def peaks_from(sol: dict) -> str:
    """Which of a baseline's peaks came from the task's own figures, not the calibration ('' : none did)."""
    return "; ".join(f"{peak}: {how}" for peak, how in (sol.get("peaks_used") or {}).items() if how != "calibrated")


def opponent_bound(opponent) -> str:
    """Why the opponent's bound is not to be used ('' when it is): the loop's note, or its own baseline's times."""
    if opponent is None:
        return ""
    return opponent.bound_why or unreliable(opponent.bound_ms, {"eager PyTorch": opponent.eager_ms,
                                                                "torch.compile": opponent.compiled_ms})


def left_to_compiler(opponent) -> str:
    """Why a search would spend its calls for nothing ('' when it would not): torch.compile, the baseline,
    already runs within COMPILER_NEAR of the floor of any algorithm, its bytes moved once. Not of a compute
    bound: that is the reference's arithmetic, and a kernel may do less (diag(a) @ b as a row scaling ran 40x
    torch.compile on a CPU, where the compiled matmul was within 1.2x of its compute bound and was gated)."""
    if opponent is None or opponent.baseline != "compile" or not opponent.bound_ms or opponent.compiled_ms is None:
        return ""
    if opponent_bound(opponent) or not opponent.floor_ms:  # a bound the baseline beats, or no floor, gates nothing
        return ""
    if opponent.compiled_ms > COMPILER_NEAR * opponent.floor_ms:
        return ""
    return (f"left to the compiler: torch.compile takes {opponent.compiled_ms:.4f} ms, within {COMPILER_NEAR}x of "
            f"moving its bytes once ({opponent.floor_ms:.4f} ms{_from(opponent)}), the floor of any kernel; nothing "
            "was spent. --force searches anyway")


def at_bound(member, opponent) -> str:
    """'at the bound: ...' when `member` (the best) beats its baseline beyond noise and its device time is
    within AT_BOUND of the opponent's speed of light, else ''. A bound that anything measured beats by more
    than SPREAD (the member included) stops nothing."""
    bound_ms = opponent.bound_ms if opponent is not None else None
    if member is None or not bound_ms or not member.figures.ms or member.figures.ms > AT_BOUND * bound_ms:
        return ""
    if opponent_bound(opponent) or unreliable(bound_ms, {f"kernel {member.kernel_id}": member.figures.ms}):
        return ""
    ahead = member.fitness_ci[0] > 1.0 if member.fitness_ci else member.fitness > 1.0
    if not ahead:
        return ""
    return (f"at the bound: kernel {member.kernel_id} takes {member.figures.ms:.4f} ms, within {AT_BOUND}x of the "
            f"speed of light ({bound_ms:.4f} ms{_from(opponent)})")


def floor_reached(member, opponent) -> str:
    """'at the floor: ...' when `member` (the best, correct) and the baseline both run within AT_BOUND of the
    floor of any kernel (the task's bytes moved once), else ''. Nothing is left to win there, ahead of the
    baseline or not: 88_MinGPTNewGelu's first kernel ran at 101 % of its floor beside torch.compile's 99 %, and
    five more calls found nothing faster. Not of a compute bound: float32 GEMMs on TF32 tensor cores ran 1.8x a
    torch.compile within 1.02x of the float32 arithmetic's bound. A floor anything beats by more than SPREAD
    (the data stays in cache) stops nothing."""
    if member is None or opponent is None or not opponent.floor_ms or opponent.bound_from or not member.figures.ms:
        return ""
    floor_ms = opponent.floor_ms
    who, theirs = _ranked_against(opponent)
    if not theirs or max(member.figures.ms, theirs) > AT_BOUND * floor_ms:
        return ""
    if opponent_bound(opponent) or unreliable(floor_ms, {f"kernel {member.kernel_id}": member.figures.ms, who: theirs}):
        return ""
    return (f"at the floor: kernel {member.kernel_id} takes {member.figures.ms:.4f} ms and {who} {theirs:.4f} ms, "
            f"both within {AT_BOUND}x of moving the task's bytes once ({floor_ms:.4f} ms{_from(opponent)}): nothing "
            "is left to win")


def _ranked_against(opponent) -> tuple[str, float | None]:
    """What the search ranks against and its device time: torch.compile where it was measured, else eager."""
    if opponent.baseline == "compile" and opponent.compiled_ms:
        return "torch.compile", opponent.compiled_ms
    return "eager PyTorch", opponent.eager_ms


def _from(opponent) -> str:
    """Which peaks the bound stands on: the device's calibration, or the task's own figures where they showed more."""
    return f"; peaks from {opponent.bound_from}" if opponent.bound_from else "; calibrated peaks"
