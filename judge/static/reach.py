"""Static checks of what a candidate reaches beyond its inputs: files, the environment and the network
(`io_access`), the interpreter and the judge (`introspection`). Registered in the package's CHECKS."""
from __future__ import annotations

import ast

from . import cuda as cu
from .context import Context, Finding, _findings, _in_strings, _name_of, _per_call, _refs


def io_access(ctx: Context) -> list[Finding]:
    # Files, environment and network let a candidate remember answers or tell checking from timing.
    todo = "compute from forward's inputs only (print() for logging is fine)"
    what = "reaches files, the environment or the network"
    # Making a directory to build the extension in, at import or in __init__, is what load_inline does
    # itself; only on forward's path does it have no honest use.
    # Writing the kernel's sources there to build them (what load_inline does with its strings) is as
    # honest: it writes, never reads back, so nothing computed earlier can come back as an answer.
    per_call = {line for fn in _per_call(ctx) for line in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)}
    writes = {c.lineno for c in ctx.nodes if isinstance(c, ast.Call) and _name_of(ctx, c.func) == "builtins.open"
              and _write_only(c)}
    hits = [(line, f"{name} {what}", todo) for line, name in _refs(
        ctx, r"(pathlib|shutil|tempfile|socket|urllib|urllib3|http|requests|httpx|aiohttp|ftplib|smtplib|pickle|dill"
             r"|cloudpickle|joblib|shelve|dbm|sqlite3|glob|fcntl|mmap)(\..*)?|builtins\.(open|exit|quit|input)"
             r"|io\.(open|FileIO)|os\.(environ\w*|getenv\w*|putenv|unsetenv|open|read|write|remove|unlink|rename"
             r"|replace|makedirs|mkdir|rmdir|removedirs|listdir|scandir|walk|dup2?|kill|killpg|_exit|abort|truncate"
             r"|chdir|chmod|link|symlink|pipe|mkfifo|fdopen)(\..*)?|sys\.(exit|argv|stdin)(\..*)?"
             r"|torch\.(save|load|from_file|hub)(\..*)?|numpy\.(save\w*|load\w*|fromfile|memmap|genfromtxt)")
        if line in per_call or not (name in ("os.makedirs", "os.mkdir") or name == "builtins.open" and line in writes)]
    return _findings("io_access", hits + _in_strings(ctx, cu.IO, what, todo))


def _write_only(call: ast.Call) -> bool:
    """open(path, "w") and kin: a constant mode that creates or appends and never reads."""
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else ""
    return bool(text) and any(c in text for c in "wax") and not any(c in text for c in "r+")


_FRAME_ATTRS = frozenset({"__subclasses__", "__globals__", "__code__", "__closure__", "f_back", "f_locals",
                          "f_globals", "tb_frame", "gi_frame", "cr_frame", "__builtins__",
                          "findCaller"})  # a logger's findCaller reads its callers' frames


def introspection(ctx: Context) -> list[Finding]:
    # Frames, the garbage collector and the judge's modules hold the reference output and the timers.
    todo = "use only torch, math and kernelevo.runtime (launch kernels through it, not ctypes)"
    what = "reaches into the interpreter or the judge"
    hits = [(line, f"{name} {what}", todo) for line, name in _refs(
        ctx, r"(gc|inspect|ctypes|_ctypes|importlib|cffi)(\..*)?|sys\.(_getframe|_getframemodulename|_current_frames"
             r"|modules|settrace|setprofile|meta_path|path_hooks)(\..*)?|builtins\.(__import__|eval|exec|compile"
             r"|globals|locals|breakpoint)|kernelevo\.(?!runtime(\.|$)).*"
             # the stack walkers name every caller, which tells the judge's calls from a user's; the
             # exception formatters (format_exc, extract_tb) only read the candidate's own error
             r"|traceback\.(walk_stack|extract_stack|format_stack|print_stack|StackSummary)(\..*)?")]
    hits += [(n.lineno, f"vars() {what}", todo) for n in ctx.nodes
             if isinstance(n, ast.Call) and not n.args and _name_of(ctx, n.func) == "builtins.vars"]
    hits += [(n.lineno, f"{name} {what}", todo) for n in ctx.nodes
             if (name := getattr(n, "attr", None) or getattr(n, "id", None)) in _FRAME_ATTRS]
    return _findings("introspection", hits + _in_strings(ctx, cu.INTROSPECTION, what, todo))
