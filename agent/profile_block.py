"""A stored Profile as the short, deterministic text block that mutate and reflect prompts show
under a kernel: how far from the speed of light, what dominates, what limits it.

Same profile, same text: numbers are rounded to what the model can act on, lists are cut to the
few largest entries, and every sentence comes from prompts/ (phrases.toml's [profile] table).
"""
from __future__ import annotations

import string

from kernelevo.evaluation import Profile

from .prompting import fill, phrases

TOP = 3  # kernels listed per side
NEAR, FAR = 75.0, 30.0  # % of the speed of light: above NEAR polish is nearly done, below FAR rethink


def _say(key: str, **values: object) -> str:
    return string.Template(phrases()["profile"][key]).substitute({k: str(v) for k, v in values.items()})


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else phrases()["labels"]["unknown"]


def _ms(value: float) -> str:
    return f"{value:.3g}" if value >= 0.001 else f"{value:.2g}"


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _kernels(kernels, key: str, backend: str) -> str:
    """The few largest entries (those of 1 % of the time or more), the rest counted."""
    if not kernels:
        return ""
    shown = [k for k in kernels[:TOP] if k.share >= 0.01] or list(kernels[:1])
    items = [_say("item", name=k.name, ms=_ms(k.ms), share=_pct(100 * k.share)) for k in shown]
    if len(kernels) > len(shown):
        items.append(_say("more", count=len(kernels) - len(shown)))
    launches = sum(k.launches for k in kernels)
    return _say(key if backend == "cuda" else f"{key}_cpu", launches=f"{launches:g}",
                total_ms=_ms(sum(k.ms for k in kernels)), list="; ".join(items))


def _advice(s) -> str:
    """What the % of the speed of light means for the next change. Past the bound, say only what
    is known: a memory bound is beaten by cache residency (or a low calibration), and a kernel
    that skips arithmetic is already measured against its memory floor (sol_fewer_flops)."""
    pct = s.candidate_pct
    if pct is None:
        return ""
    if pct > 105:
        if s.bound == "memory" or s.fewer_flops:
            return " " + _say("above_memory", bytes=_bytes(s.bytes))
        return " " + _say("above_compute", dtype=s.dtype)
    return " " + _say("near" if pct >= NEAR else "far" if pct < FAR else "room")


def _sol(profile: Profile) -> str:
    s = profile.sol
    if s is None or not s.bound_ms:
        return ""
    if s.bound == "memory":
        work = _say("memory_work", bytes=_bytes(s.bytes), bandwidth=f"{_bytes(s.peak_bytes)}/s")
    else:
        work = _say("compute_work", gflop=f"{s.flops / 1e9:.3g}", dtype=s.dtype, tflops=f"{s.peak_flops / 1e12:.3g}")
    if s.fewer_flops:
        floor = _say("memory_work", bytes=_bytes(s.bytes), bandwidth=f"{_bytes(s.peak_bytes)}/s")
        line = _say("sol_fewer_flops", bound_ms=_ms(s.bound_ms), work=work, memory_ms=_ms(s.memory_ms), floor=floor,
                    candidate_pct=_pct(s.candidate_pct), reference_pct=_pct(s.reference_pct))
    else:
        line = _say("sol", bound_ms=_ms(s.bound_ms), bound=s.bound, work=work, candidate_pct=_pct(s.candidate_pct),
                    reference_pct=_pct(s.reference_pct))
    return line + _advice(s)


def _resources(profile: Profile) -> str:
    ran = {k.name for k in profile.candidate}
    chosen = [r for r in profile.resources if any(r.name in name for name in ran)] or list(profile.resources)
    items = []
    for r in chosen[:TOP]:
        if r.compiler == "driver":
            spills = _say("local", bytes=r.stack_bytes)
        elif r.spill_stores or r.spill_loads:
            spills = _say("spills", stores=r.spill_stores, loads=r.spill_loads)
        else:
            spills = _say("no_spills")
        items.append(_say("resource", name=r.name, registers=r.registers, spills=spills, shared=r.shared_bytes))
    return _say("resources", list="; ".join(items)) if items else ""


def _ncu(profile: Profile) -> str:
    if not profile.ncu:
        return ""
    k = profile.ncu[0]  # the longest kernel
    stalls = ", ".join(f"{reason} ({_pct(100 * share)})" for reason, share in k.stalls) or "nothing"
    return _say("ncu", name=k.name, occupancy=_pct(k.occupancy), dram=_pct(k.dram), l2=_pct(k.l2), sm=_pct(k.sm),
                stalls=stalls)


def profile_block(profile: Profile) -> str:
    """The block for a prompt; "" when the profile holds nothing to say."""
    lines = [_sol(profile), _kernels(profile.candidate, "kernels", profile.backend),
             _kernels(profile.reference, "reference", profile.backend),
             _resources(profile), _ncu(profile)]
    lines = [line for line in lines if line]  # notes (what was skipped) are for the user, not the model
    return fill("profile.md", device=profile.device_name, lines="\n".join(lines)) if lines else ""
