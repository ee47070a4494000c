"""Prompts rendered from the files in `prompts/` and typed contexts.

Every operator's prompt has the same stable prefix (rules and candidate formats, notes for the
target device, the task's reference code), so repeated calls for one task hit the providers'
prompt caches; Anthropic gets `cache_control` where the prefix ends. What changes from call to
call (parents, measurements, profiles, feedback, the job) comes last.
"""
from __future__ import annotations

import functools
import importlib.resources
import string
import tomllib
from dataclasses import dataclass, field

from kernelevo.evaluation import Failure, Figures, Shown, Variant, Verdict
from kernelevo.formats import FORMATS, native

from .edits import EditFailure
from .providers import Message


class PromptError(LookupError):
    """A template asked for a value its context does not have (a bug, named precisely)."""


@functools.cache
def template_text(name: str) -> str:
    """The text of prompts/NAME, without its final newline."""
    text = importlib.resources.files("kernelevo.prompts").joinpath(name).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


@functools.cache
def phrases() -> dict:
    return tomllib.loads(template_text("phrases.toml"))


def fill(template: str, /, **values: object) -> str:
    """prompts/TEMPLATE with its $placeholders filled; every placeholder must have a value."""
    try:
        return string.Template(template_text(template)).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise PromptError(f"prompts/{template} needs ${exc.args[0]}, which its context does not give") from None


@dataclass(frozen=True)
class Target:
    """What kernels are written for: the candidate format and the device."""

    format: str  # "nvrtc", "inline", "c" or "triton"
    name: str  # "NVIDIA H100 80GB HBM3", or the CPU's model name
    capability: tuple[int, int] | None = None  # None on the CPU
    sm_count: int = 0
    memory_gib: float = 0.0
    l2_mib: float = 0.0
    smem_kib: int = 0  # shared memory per block with opt-in
    cores: int = 0
    compiler: str = ""  # how C candidates are built (runtime.c.compiler_command), when known


@dataclass(frozen=True)
class TaskView:
    name: str
    source: str
    inputs: str  # "float32[4096, 4096]"
    init_args: str  # repr of get_init_inputs()
    functional: str = ""  # a functional PyTorch rewrite, when one was made
    graphed: bool = False  # one part of a model (split.json beside it), on a GPU: replayed in its model's CUDA graph


@dataclass(frozen=True)
class Opponent:
    """What a kernel must beat, as measured before the first call: the baseline the search ranks by
    ("compile" or "eager"), the reference's device time per call each way, and each way's largest
    kernels under the profiler (on a GPU): (name, launches per call, ms per call)."""

    baseline: str
    eager_ms: float
    compiled_ms: float | None = None
    eager_kernels: tuple[tuple[str, float, float], ...] = ()
    compiled_kernels: tuple[tuple[str, float, float], ...] = ()
    bound_ms: float | None = None  # the reference's speed of light on this device, where measured
    bound_why: str = ""  # why that estimate is wrong here ("" : nothing measured says so; evolution/bound.py)
    bound_from: str = ""  # where its peaks came from, where not the device's calibration (judge/measure/sol.py)
    floor_ms: float | None = None  # its bytes moved once: the floor of any algorithm (the bound is the reference's)


@dataclass(frozen=True)
class Context:
    """Everything the stable prefix depends on, plus what later prompts may add."""

    task: TaskView
    target: Target
    opponent: Opponent | None = None  # what the kernel must beat, measured before the first call
    insights: tuple[str, ...] = field(default_factory=tuple)  # earlier reflections' analyses
    inspirations: tuple[Variant, ...] = field(default_factory=tuple)  # stepping stones of earlier runs


def _then(text: str) -> str:
    """An optional block: a blank line, then the block; nothing when there is none."""
    return f"\n\n{text}" if text else ""


def _formats(target: Target) -> str:
    """The requested format in full; for a CUDA format the other one too (the prompts teach both)."""
    if target.format in ("c", "triton"):
        return fill(f"format_{target.format}.md", requested=template_text("requested.md"))
    other = "inline" if target.format == "nvrtc" else "nvrtc"
    return "\n\n".join([fill(f"format_{target.format}.md", requested=template_text("requested.md")),
                        fill(f"format_{other}.md", requested=template_text("alternative.md"))])


_TIMING = {"gpu": "timing_gpu.md", "cpu": "timing_cpu.md", "interpreter": "timing_interpreter.md"}


def _where(target: Target) -> str:
    """Where the kernels run: gpu, cpu, or interpreter (Triton kernels on a machine without a GPU:
    checked in Triton's interpreter, not timed)."""
    if target.capability is not None:
        return "gpu"
    return "interpreter" if target.format == "triton" else "cpu"


def _device_notes(target: Target) -> str:
    if target.capability is None and target.format == "triton":
        return fill("device_interpreter.md", name=target.name)
    if target.capability is None:
        compiler = fill("compiler_cpu.md", command=target.compiler) if target.compiler else ""
        return fill("device_cpu.md", name=target.name, cores=target.cores, compiler=compiler)
    major, minor = target.capability
    arch = {9: "arch_hopper.md", 8: "arch_ampere.md"}.get(major, "arch_generic.md")
    return fill("device_gpu.md", name=target.name, capability=f"{major}.{minor}", sm=f"{major}{minor}",
                sm_count=target.sm_count, memory_gib=f"{target.memory_gib:.0f}", l2_mib=f"{target.l2_mib:.0f}",
                smem_kib=target.smem_kib, arch_notes=template_text(arch))


def prefix(ctx: Context) -> list[Message]:
    """The stable part: system rules, formats and device notes; then the task, where the cache ends."""
    if ctx.target.format not in FORMATS:
        raise ValueError(f"format {ctx.target.format!r}: use one of {', '.join(FORMATS)}")
    where = _where(ctx.target)
    timing = template_text(_TIMING[where]).rstrip("\n")
    role = phrases()["labels"]["role_cpu" if where == "cpu" else "role_gpu"]
    system = fill("system.md", role=role, formats=_formats(ctx.target), device_notes=_device_notes(ctx.target),
                  timing=timing)
    task = ctx.task
    functional = _then(fill("task_functional.md", code=task.functional.rstrip("\n")) if task.functional else "")
    user = fill("task.md", name=task.name, source=task.source.rstrip("\n"), inputs=task.inputs,
                init_args=task.init_args, functional=functional)
    if task.graphed:
        user += _then(template_text("task_graphed.md").rstrip("\n"))
    if ctx.opponent:  # measured once before the first call: part of the cached prefix
        user += _then(opponent(ctx.opponent))
    if ctx.inspirations:  # fixed for the whole run, so they belong to the cached prefix
        user += _then(fill("inspirations.md", kernels="\n\n".join(variant(v, task.graphed) for v in ctx.inspirations)))
    return [Message("system", system), Message("user", user, cache=True)]


def _kernel_list(who: str, kernels: tuple[tuple[str, float, float], ...]) -> str:
    if not kernels:
        return ""
    items = [phrase("opponent", "kernel", name=name, ms=_number(ms, 4),
                    launches=phrase("opponent", "launch_one") if n == 1 else phrase("opponent", "launch_many", n=f"{n:g}"))
             for name, n, ms in kernels]
    return phrase("opponent", "kernels", who=phrases()["opponent"][who], list="; ".join(items))


def opponent(o: Opponent) -> str:
    """The block saying which baseline ranks kernels, its time per call, and its kernels."""
    compiled = _kernel_list("compiled_who", o.compiled_kernels)
    eager = _kernel_list("eager_who", o.eager_kernels)
    kernels = "".join(f"\n\n{k}" for k in ((compiled, eager) if o.baseline == "compile" else (eager, compiled)) if k)
    bound = phrase("opponent", "bound", bound_ms=_number(o.bound_ms, 4), eager_pct=_pct(o.bound_ms, o.eager_ms),
                   compiled_pct=_pct(o.bound_ms, o.compiled_ms)) if o.bound_ms and o.compiled_ms else ""
    if o.bound_ms and o.bound_why:
        bound = phrase("opponent", "bound_unreliable", bound_ms=_number(o.bound_ms, 4), why=o.bound_why)
    if o.baseline == "compile" and o.compiled_ms is not None:
        return fill("opponent_compile.md", compiled_ms=_number(o.compiled_ms, 4), eager_ms=_number(o.eager_ms, 4),
                    kernels=kernels, bound=bound)
    compiled_ms = phrase("opponent", "compiled", compiled_ms=_number(o.compiled_ms, 4)) if o.compiled_ms is not None else ""
    return fill("opponent_eager.md", eager_ms=_number(o.eager_ms, 4), compiled=compiled_ms, kernels=kernels, bound=bound)


def _pct(bound_ms: float | None, ms: float | None) -> str:
    return f"{100 * bound_ms / ms:.0f}" if bound_ms and ms else phrases()["labels"]["unknown"]


def _answer(edit_format: str, parent_label: str) -> str:
    if edit_format == "diff":
        return fill("answer_diff.md", parent_label=parent_label)
    return template_text("answer_whole.md")


def _insights(ctx: Context) -> str:
    if not ctx.insights:
        return ""
    return _then(fill("insights.md", text="\n\n".join(i.strip() for i in ctx.insights)))


def _number(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if value is not None else phrases()["labels"]["unknown"]


HOST_BOUND = 0.2  # a host share of a call above which the prompt says launches and allocations dominate


def _loop(f: Figures, graphed: bool = False) -> str:
    """The kernel called back to back, with its host work's share; where that share is large, advice that fits
    where the kernel will run (`graphed`: in a model's CUDA graph, where host work is not paid per call)."""
    if f.loop_ms is None:
        return ""
    large = "host_graphed" if graphed else "host_bound"
    host = "" if f.host_share is None else phrase(
        "labels", large if f.host_share > HOST_BOUND else "host_share", pct=f"{100 * f.host_share:.0f}",
        ms=_number(f.loop_ms * f.host_share, 4))
    return fill("loop_beside.md", loop_ms=_number(f.loop_ms, 4), host=host)


def variant(v: Variant, graphed: bool = False) -> str:
    """A measured kernel as the prompts show it; `graphed`: the task is a model's part, run in its CUDA graph."""
    f, shown = v.figures, v.shown
    if f.verdict == Verdict.OK:
        compiled = f"{_number(f.speedup_compile)}x torch.compile" if f.speedup_compile is not None \
            else f"torch.compile {phrases()['labels']['unknown']}"  # not "not measuredx torch.compile"
        beside = fill("eager_beside.md", eager_ms=_number(f.eager_ms, 4)) if f.eager_ms is not None else ""
        measured = fill("measured_ok.md", eager=_number(f.speedup_eager), compiled=compiled, ms=_number(f.ms, 4),
                        beside=beside, loop=_loop(f, graphed))
    else:
        measured = fill("measured_failed.md", verdict=f.verdict, reason=f.reason, message=f.message)
    attempts = (_then(fill("attempts.md", label=shown.label, lines="".join(shown.attempts).rstrip("\n")))
                if shown.attempts else "")
    return fill("variant.md", label=shown.label, format=v.format, measured=measured,
                kernel=f", kernel {v.kernel_id}" if v.kernel_id is not None else "",
                notes=f"\n{shown.notes}" if shown.notes else "", source=v.source.rstrip("\n"),
                profile=f"\n{shown.profile}" if shown.profile else "", attempts=attempts)


def phrase(section: str, key: str, **values: object) -> str:
    """A phrase of prompts/phrases.toml with its $names filled."""
    return string.Template(phrases()[section][key]).substitute({k: str(v) for k, v in values.items()})


def attempt_line(kernel_id: int, operator: str, idea: str, outcome: str) -> str:
    """One line of an attempt list: which kernel, by which operator, its idea, what came of it."""
    return fill("attempt.md", kernel=kernel_id, operator=operator, idea=idea or phrase("attempt", "no_idea"),
                outcome=outcome) + "\n"


def insight(analysis: str, compared: list[tuple[int, float | None]]) -> str:
    """An earlier reflection's analysis, with the kernels its letters named (id and speedup then):
    its letters A, B, ... are not the letters of the prompt it is shown in."""
    legend = ", ".join(f"{'ABCDEFGH'[i]} = kernel {kernel} ("
                       + (f"{s:.2f}x" if s is not None else phrases()["labels"]["unknown"]) + ")"
                       for i, (kernel, s) in enumerate(compared[:8]))
    return fill("insight.md", legend=legend, analysis=analysis.strip()) if legend else analysis.strip()


def approach(descriptors: dict, fmt: str) -> str:
    """A kernel's approach in words (from evolution.niches.describe), for prompts that compare kernels."""
    words = phrases()["approach"]
    launches = words["launches_cpu" if fmt == "c" else "launches_gpu"]
    try:
        parts = [launches[min(3, max(0, int(descriptors.get("launches", 0) or 0)))]]
    except (TypeError, ValueError):
        parts = []
    parts += [words[key] for key in ("shared_memory", "tensor_cores", "vector_io", "torch_ops")
              if descriptors.get(key)]
    return string.Template(words["line"]).substitute(parts="; ".join(parts)) if parts else ""


def feedback(fb: Failure) -> str:
    details = ""
    if fb.where or fb.rel_l2 is not None:
        details += _then(fill("feedback_mismatch.md", where=fb.where or "?", rel_l2=_sci(fb.rel_l2),
                        max_abs=_sci(fb.max_abs), max_rel=_sci(fb.max_rel), tolerance=_tolerance(fb.tolerance)))
    if fb.excerpt.strip():
        details += _then(fill("feedback_excerpt.md", excerpt=fb.excerpt.strip("\n")))
    return fill("feedback.md", verdict=fb.verdict, reason=fb.reason, message=fb.message, details=details)


def _tolerance(bounds: str) -> str:
    """The bounds that applied, as a phrase; nothing when the judge did not say (a '?' helps no one)."""
    if not bounds:
        return ""
    return phrase("feedback", "tolerance", tolerance=bounds)


def _sci(value: float | None) -> str:
    return f"{value:.3g}" if value is not None else "?"


def _conversation(ctx: Context, job: str) -> list[Message]:
    return [*prefix(ctx), Message("user", job)]


def translate(ctx: Context, earlier: tuple[str, ...] = ()) -> list[Message]:
    """`earlier`: attempt lines of the run's translations so far (the next is asked to differ)."""
    attempts = _then(fill("translations.md", lines="".join(earlier).rstrip("\n"))) if earlier else ""
    return _conversation(ctx, fill("translate.md", format=ctx.target.format, attempts=attempts,
                                   answer=_answer("whole", "")))


def functional(ctx: Context) -> list[Message]:
    return _conversation(ctx, template_text("functional.md"))


def repair(ctx: Context, failed: Variant, fb: Failure, edit_format: str = "whole") -> list[Message]:
    job = fill("repair.md", source=failed.source.rstrip("\n"), feedback=feedback(fb),
               answer=_answer(edit_format, "the failed kernel"))
    return _conversation(ctx, job)


def mutate(ctx: Context, parent: Variant, edit_format: str = "whole") -> list[Message]:
    job = fill("mutate.md", parent=variant(parent, ctx.task.graphed), insights=_insights(ctx),
               answer=_answer(edit_format, f"kernel {parent.shown.label}"))
    return _conversation(ctx, job)


def crossover(ctx: Context, parents: list[Variant]) -> list[Message]:
    parents_text = "\n\n".join(variant(p, ctx.task.graphed) for p in parents)
    job = fill("crossover.md", parents=parents_text, insights=_insights(ctx), answer=_answer("whole", ""))
    return _conversation(ctx, job)


def reflect(ctx: Context, variants: list[Variant]) -> list[Message]:
    ranked = sorted(variants, key=lambda v: -(v.figures.speedup_eager or 0.0))
    job = fill("reflect.md", count=len(ranked), variants="\n\n".join(variant(v, ctx.task.graphed) for v in ranked),
               insights=_insights(ctx), answer=_answer("whole", ""))
    return _conversation(ctx, job)


def edit_failed(failures: list[EditFailure], applied: int) -> str:
    """The follow-up message naming each failed SEARCH/REPLACE block and the file's real lines."""
    problems = phrases()["edit_problems"]
    parts = [fill("edit_failure.md", number=f.edit.number, problem=problems.get(f.problem, f.problem),
                  search=f.edit.search.rstrip("\n"), line=f.line or "?",
                  closest=f.closest.rstrip("\n")) for f in failures]
    return fill("edit_failed.md", failed=len(failures), applied=applied, failures="\n\n".join(parts) + "\n")


def task_view(task, graphed: bool = False) -> TaskView:
    """The prompt's view of a loaded kernelevo.tasks.Task; `graphed`: a model's part, to be run in its CUDA graph."""
    return TaskView(task.name, task.source, task.input_summary(), repr(list(task.init_args)), graphed=graphed)


def target_for(device: str, fmt: str | None = None) -> Target:
    """The target of `device` ("cuda:N" or "cpu"), in `fmt` or the device's own format (kernelevo.formats.native)."""
    import os
    import platform

    if device == "cpu":
        from kernelevo.host import cpu_name
        from kernelevo.runtime.c import compiler_command

        return Target(fmt or native(device), cpu_name() or platform.processor() or "CPU", cores=os.cpu_count() or 1,
                      compiler=compiler_command())
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    return Target(fmt or native(device), props.name, (props.major, props.minor), props.multi_processor_count,
                  props.total_memory / 2**30, getattr(props, "L2_cache_size", 0) / 2**20,
                  getattr(props, "shared_memory_per_block_optin", 49152) // 1024)


def target_from_info(info: dict, fmt: str | None = None) -> Target:
    """The target a judge worker described (executor.device_info): for a cluster, whose GPUs the
    driver does not have."""
    if not info.get("capability"):
        return Target(fmt or native("cpu"), info.get("device_name") or "CPU", cores=int(info.get("cores") or 1),
                      compiler=info.get("compiler", ""))
    major, minor = (int(x) for x in str(info["capability"]).split("."))
    return Target(fmt or native("cuda"), info["device_name"], (major, minor), int(info.get("sm_count", 0)),
                  float(info.get("memory_gib", 0.0)), float(info.get("l2_mib", 0.0)), int(info.get("smem_kib", 0)))


def feedback_from(evaluation) -> Failure:
    """What the judge said of a failed candidate (a kernelevo.evaluation.Evaluation), for repair."""
    c = evaluation.correctness
    wrong = evaluation.verdict == "incorrect" and c is not None
    return Failure(evaluation.verdict, evaluation.reason, evaluation.message, evaluation.excerpt,
                    where=c.where if wrong else "", rel_l2=c.rel_l2 if wrong else None,
                    max_abs=c.max_abs if wrong else None, max_rel=c.max_rel if wrong else None,
                    tolerance=c.tolerance if wrong else "")


def variant_from(source: str, fmt: str, evaluation, label: str = "A", profile: str = "", notes: str = "") -> Variant:
    """A judged kernel as the prompts show it."""
    return Variant(source, fmt, figures=Figures.of(evaluation), shown=Shown(label, profile, notes))
