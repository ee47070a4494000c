"""The candidate's sandbox (judge/run/sandbox.py): candidates that hide their environment, file and
socket calls are judged through the CLI with fake keys in its environment, a listener on 127.0.0.1
and a folder outside the judge's; nothing may reach either, and the verdict names what was refused.
The GPU versions (an inline candidate's host C++, a Triton candidate on the device) are in
test_gpu_sandbox.py."""
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernelevo.judge.api import Judge, JudgeOptions
from kernelevo.judge.measure.timing import TimingConfig
from kernelevo.judge.run import builds, landlock, sandbox, seccomp, zygote
from kernelevo.tasks import load_task

from conftest import FIXTURES, run_cli

KEYS = {"OPENAI_API_KEY": "sk-canary-openai-7f3a", "ANTHROPIC_API_KEY": "sk-ant-canary-91c2",
        "WORK_LLM_SECRET": "canary-secret-55d0", "KERNELEVO_MODEL_TOKEN": "canary-token-0b8e"}


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection made to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(5)
            try:
                self.received.append(conn.recv(1 << 16) or b"(connected, sent nothing)")
            except OSError:
                self.received.append(b"(connected)")
            conn.close()

    def close(self):
        self.sock.close()


def reach(fixture: Path, tmp_path: Path, device: str, cache: Path | None = None) -> tuple[dict, Listener, list[Path]]:
    """Judge `fixture` through `kernelevo evaluate --json` with fake keys in the environment, its judge cache
    `cache` (by default a new one in `tmp_path`); returns the verdict, the listener, and every file outside
    the judge's cache that holds a key."""
    cache = cache or tmp_path / "cache"
    listener = Listener()
    outside = tmp_path / "outside"
    outside.mkdir()
    source = fixture.read_text().replace("@PORT@", str(listener.port)).replace("@OUTSIDE@", str(outside))
    candidate = tmp_path / fixture.name
    candidate.write_text(source)
    task = FIXTURES / source.split("# task: ", 1)[1].split()[0]
    env = {**os.environ, **KEYS}
    exe = shutil.which("kernelevo", path=str(Path(sys.executable).parent)) or shutil.which("kernelevo")
    done = subprocess.run([exe, "evaluate", str(task), str(candidate), "--device", device, "--json",
                           "--cache-dir", str(cache)], env=env, capture_output=True, text=True,
                          timeout=900)
    listener.close()
    assert done.returncode == 0, done.stderr[-3000:]
    places = [p for p in tmp_path.rglob("*") if p.is_file() and cache not in p.parents]
    places += [p for p in Path("/tmp").glob("kernelevo-loot*") if p.is_file()]
    leaked = [p for p in places if any(v.encode() in p.read_bytes() for v in KEYS.values())]
    return json.loads(done.stdout), listener, leaked


SOFTMAX = FIXTURES / "cpu" / "task_softmax.py"
OPTIONS = JudgeOptions(devices=("cpu",), timing=TimingConfig(min_reps=5, max_seconds=0.2))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """A judge cache in which task_softmax's baseline was measured, torch.compile's included: the tests that
    judge a candidate of that task against torch.compile share its compile (the code inductor wrote in the
    opponent's folder, the baseline's record), as a user's runs share a cache, rather than each compiling it
    anew. The test that deletes the baselines to compile the opponent again (the plant) is the last of them."""
    cache = tmp_path_factory.mktemp("compiled") / "cache"
    with Judge(cache, OPTIONS) as judge:
        assert judge.baseline(load_task(SOFTMAX), "cpu").compiled_ms is not None
    return cache


def _confined(verdict: dict) -> tuple[str, ...]:
    return tuple(part for part in ("files", "network") if verdict["confinement"][part].startswith("unconfined"))


@pytest.mark.parametrize("fixture", ["reach_c.py", "reach_triton.py"])
def test_a_candidate_that_hides_its_reach_takes_nothing(tmp_path, fixture, compiled):
    verdict, listener, leaked = reach(FIXTURES / "sandbox" / fixture, tmp_path, "cpu", compiled)
    if _confined(verdict):
        pytest.skip(f"this machine leaves {', '.join(_confined(verdict))} unconfined: {verdict['confinement']}")
    assert not leaked, f"a key reached {leaked}"
    assert not listener.received, listener.received
    assert (verdict["verdict"], verdict["reason"]) == ("rejected", "io_access"), verdict["message"]
    refused = {r["call"] for r in verdict["evidence"]["refused"]}
    assert {"socket", "open"} <= refused, verdict["evidence"]
    assert "socket(AF_INET, SOCK_STREAM)" in verdict["message"] and "/outside/loot" in verdict["message"]
    assert verdict["evidence"]["verdict_before"] == "ok"  # right on every input: only the sandbox stopped it


def test_a_forked_worker_holds_nothing_of_the_process_that_forked_it(tmp_path, monkeypatch):
    """Workers are forked by a zygote that imported torch once (judge/run/zygote.py): seen from inside, a
    worker's folder and environment are its own, its folder (which the candidate writes) is not on its import
    path, and no descriptor leads back to the zygote (a socket to it would let a candidate ask for an
    unconfined process)."""
    monkeypatch.setenv("WORK_LLM_SECRET", KEYS["WORK_LLM_SECRET"])
    with Judge(tmp_path / "cache", JudgeOptions(devices=("cpu",), compile_baseline=False)) as judge:
        e = judge.evaluate(load_task(FIXTURES / "cpu" / "task_scale.py"), FIXTURES / "sandbox" / "inside_view.py")
        zygote = judge.executor.pools["cpu"].zygote._proc.pid
    found = re.search(r"VIEW (\{.*?\})(\n|$)", f"{e.message}\n{e.excerpt}")
    assert found, (e.verdict, e.message, e.excerpt)
    view = json.loads(found.group(1))
    seen = dict(part.split("=", 1) for part in view["c"].split("|") if not part.startswith("fd="))
    fds = dict(part[3:].split(":", 1) for part in view["c"].split("|") if part.startswith("fd="))
    assert view["parent"] == zygote, (view, zygote)  # forked, not started anew
    assert "-m kernelevo.judge.run.worker cpu " in seen["cmd"], seen  # and named so (ps, pkill -f), not as its zygote
    assert Path(view["cwd"]).parent == (tmp_path / "cache" / "scratch").resolve() and not view["cwd_on_path"]
    # one socket at most: the pair to the bounds trial's launcher, which it forked itself (its one child)
    sockets = [target for target in fds.values() if target.startswith("socket:")]
    assert len(sockets) <= 1 and (not sockets or len(seen["children"].split()) == 1), (fds, seen["children"])
    environ, shown = set(seen["env"].split(",")), set(seen["shown"].split(","))
    assert "WORK_LLM_SECRET" not in environ | shown and {"KERNELEVO_SANDBOX", "HOME", "TMPDIR"} <= environ
    # and its OpenMP pool sleeps between parallel regions, so the checker's clock sees one busy thread (clock.py)
    assert "OMP_WAIT_POLICY" in environ


def test_a_candidate_cannot_rewrite_the_code_torch_compile_made_for_its_opponent(compiled):
    """torch.compile loads the code it finds in its cache as it is. A candidate that could write there would
    slow the compiled reference of every later baseline or final judgement (or run its own code in it):
    the opponent's caches are written only by baseline workers, and read by candidates (sandbox.OPPONENT)."""
    task, cache = load_task(SOFTMAX), compiled
    with Judge(cache, OPTIONS) as judge:
        assert judge.baseline(task, "cpu").compiled_ms is not None
        made = {p: p.read_bytes() for p in cache.rglob("*.py") if b"def call(" in p.read_bytes()}
        e = judge.evaluate(task, FIXTURES / "sandbox" / "poison_opponent_c.py")
    if e.confinement is None or e.confinement.unconfined:
        pytest.skip(f"this machine leaves the worker unconfined: {e.confinement}")
    assert made, "torch.compile wrote no code for the reference"
    assert {p: p.read_bytes() for p in made} == made
    assert (e.verdict, e.reason) == ("rejected", "io_access") and "/opponent/" in e.message, (e.verdict, e.message)


PLANTED = {"planted.txt", "sitecustomize.py", "torch.py", "triton.py"}


def _planted(root: Path, token: str) -> list[Path]:
    """Files under `root` that the planting fixture wrote (its modules name the test's marker)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and (path.name in PLANTED or path.parent.name == "kernelevo" and path.name == "__init__.py"):
            with contextlib.suppress(OSError):
                if path.name == "planted.txt" or token.encode() in path.read_bytes():
                    found.append(path)
    return found


def test_a_candidate_cannot_plant_builds_or_modules_for_later_judgements(tmp_path, compiled):
    """What is judged is what the source builds to: a candidate that writes into every folder of the cache it
    reaches, with modules a process importing from there would run and its own library as an honest source's
    build, changes nothing of a later judgement. Its builds went to its own folder (sandbox: the job's build
    folder, keyed by the judge's secret), the shared and the opponent's folders and the calibration stayed
    unwritten, and nothing it planted was loaded by a later worker, a fresh zygote or the compiled baseline."""
    token = f"kernelevo-planted-{secrets.token_hex(6)}"
    marker = Path("/dev/shm") / f"{token}.loaded"
    source = (FIXTURES / "sandbox" / "plant_build_c.py").read_text().replace("@MARK@", str(marker))
    planter = tmp_path / "plant_build_c.py"
    planter.write_text(source)
    honest = FIXTURES / "general" / "softmax_ok_c.py"
    assert source.split('VICTIM = r"""', 1)[1].split('"""', 1)[0] in honest.read_text(), "VICTIM is not its source"
    task, cache, options = load_task(SOFTMAX), compiled, OPTIONS
    try:
        with Judge(cache, options) as judge:
            assert judge.baseline(task, "cpu").compiled_ms is not None
            before = judge.evaluate(task, honest)
            planted = judge.evaluate(task, planter)
        if planted.confinement is None or planted.confinement.unconfined:
            pytest.skip(f"this machine leaves the worker unconfined: {planted.confinement}")
        own = builds.folder(cache.resolve(), source)
        assert planted.verdict == "ok" or (planted.verdict, planted.reason) == ("rejected", "io_access"), \
            (planted.verdict, planted.message)
        assert _planted(own, token), "the fixture planted nothing in its own build folder"
        reached = [p for p in _planted(cache, token) if own.resolve() not in p.resolve().parents]
        assert not reached, reached
        for kept in (cache / "baselines").glob("*.json"):
            kept.unlink()  # the opponent is compiled and timed again, from what is in its folders now
        zygote._close_kept()  # and the next judge's workers come from a new zygote
        with Judge(cache, options) as judge:
            assert judge.baseline(task, "cpu").compiled_ms is not None
            after = judge.evaluate(task, honest)
        assert not marker.exists(), f"loaded: {marker.read_text()}"
        assert (before.verdict, after.verdict) == ("ok", "ok"), (after.verdict, after.message)
    finally:
        marker.unlink(missing_ok=True)
        for name in ("sitecustomize.py", "torch.py", "triton.py", "kernelevo/__init__.py"):
            path = Path("/dev/shm") / name
            with contextlib.suppress(OSError):
                if token.encode() in path.read_bytes():
                    path.unlink()
        with contextlib.suppress(OSError):
            (Path("/dev/shm") / "kernelevo").rmdir()


def test_the_worker_environment_is_an_allowlist(monkeypatch, tmp_path):
    for name, value in {**KEYS, "AWS_SECRET_ACCESS_KEY": "x", "HF_TOKEN": "x", "GITHUB_TOKEN": "x",
                        "CUDA_VISIBLE_DEVICES": "0", "TORCH_LOGS": "+dynamo", "HOME": "/home/someone",
                        "SSH_AUTH_SOCK": "/tmp/ssh-agent", "NCCL_NVLS_ENABLE": "0"}.items():
        monkeypatch.setenv(name, value)
    parent = sandbox.prepare(tmp_path / "cache", tmp_path / "cache" / "w.log", {"CUDA_CACHE_DISABLE": "1"})
    try:
        env = parent.env
        assert not set(KEYS) & set(env) and not {"AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "GITHUB_TOKEN"} & set(env)
        assert "SSH_AUTH_SOCK" not in env
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["TORCH_LOGS"] == "+dynamo" and env["NCCL_NVLS_ENABLE"] == "0"
        assert env["CUDA_CACHE_DISABLE"] == "1"
        scratch = Path(parent.plan.scratch)
        assert env["HOME"] == str(scratch / "home") and env["TMPDIR"] == str(scratch / "tmp")
        assert scratch.parent.parent == (tmp_path / "cache").resolve()
    finally:
        parent.remove()
    assert not scratch.exists()


def test_the_parents_secrets_leave_its_environ_file():
    """/proc/PID/environ of the judging process shows no secret value; the process and its children
    still have them."""
    code = ("import os, subprocess\n"
            "from kernelevo.judge.run import sandbox\n"
            "sandbox.scrub_environment_block()\n"
            "shown = open('/proc/self/environ', 'rb').read()\n"
            "print(b'sk-canary-openai-7f3a' in shown, b'CUDA_VISIBLE_DEVICES=3' in shown)\n"
            "print(os.environ['OPENAI_API_KEY'])\n"
            "print(subprocess.run(['sh', '-c', 'echo $OPENAI_API_KEY'], capture_output=True, text=True).stdout.strip())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **KEYS, "CUDA_VISIBLE_DEVICES": "3"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["False True", KEYS["OPENAI_API_KEY"], KEYS["OPENAI_API_KEY"]]


def test_the_filter_jumps_only_forward():
    """Every jump of the assembled BPF program lands inside it, after itself (the kernel refuses others)."""
    if seccomp.arch() is None:
        pytest.skip("seccomp's filter is written for x86_64 and aarch64 only")
    for notify, stream in ((True, False), (False, False), (False, True)):
        code = seccomp.program(notify, stream)
        count = len(code) // 8
        for i in range(count):
            op, jt, jf, _ = __import__("struct").unpack_from("HBBI", code, 8 * i)
            if op & 0x07 == 0x05:  # BPF_JMP
                assert i + 1 + jt < count and i + 1 + jf < count


LAUNCHER_FILTERS = r"""
import errno, os, socket, sys
from kernelevo.judge.run import seccomp
channel = socket.socket(fileno=int(sys.argv[3]))
if sys.argv[1] == "launcher":
    listener = seccomp.install_for_launcher()
    socket.send_fds(channel, [b"fd"], [listener])
    os.close(listener)
else:
    assert seccomp.install(channel) == "notify"
def made(family, kind):
    try:
        socket.socket(family, kind).close()
        return "made"
    except OSError as exc:
        return errno.errorcode[exc.errno]
print(made(socket.AF_UNIX, socket.SOCK_STREAM), made(socket.AF_UNIX, socket.SOCK_SEQPACKET), made(socket.AF_INET, socket.SOCK_STREAM))
if sys.argv[1] == "launcher":
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(b"\0kernelevo-test-" + sys.argv[2].encode())
    listener.listen(1)
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(listener.getsockname())  # the front end's part
    assert seccomp.refuse_connect()  # the checked process's part: it listens, and reaches nothing
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(listener.getsockname())
        print("connected")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
"""


def test_only_the_bounds_trials_launcher_makes_unix_stream_sockets_and_its_checked_process_connects_nowhere():
    """A worker may make no UNIX stream socket (it could reach an SSH agent's); the bounds trial's launcher
    may (compute-sanitizer's channel, run/launcher.py), its network sockets refused and reported as the
    worker's are; the process it checks connects to nothing."""
    if seccomp.arch() is None:
        pytest.skip("seccomp's filter is written for x86_64 and aarch64 only")
    said, refused = {}, {}
    for who in ("worker", "launcher"):
        ours, theirs = socket.socketpair()
        supervisor = seccomp.Supervisor(ours, lambda path: False)
        done = subprocess.run([sys.executable, "-c", LAUNCHER_FILTERS, who, secrets.token_hex(4), str(theirs.fileno())],
                              capture_output=True, text=True, timeout=60, pass_fds=(theirs.fileno(),))
        theirs.close()
        assert done.returncode == 0, done.stderr
        said[who], refused[who] = done.stdout.split(), [(r.call, r.detail) for r in supervisor.refusals]
    assert said["worker"] == ["EACCES", "made", "EPERM"]
    assert said["launcher"] == ["made", "made", "EPERM", "EACCES"]
    assert refused["worker"] == refused["launcher"] == [("socket", "AF_INET, SOCK_STREAM")]


def test_the_doctors_probe_tries_a_write_and_a_connect(tmp_path):
    found = sandbox.probe(tmp_path)
    confinement = found["confinement"]
    if "files" in confinement.unconfined or "network" in confinement.unconfined:
        pytest.skip(f"unconfined here: {confinement.summary()}")
    assert not found["wrote_outside"] and not found["connected"], found
    assert {r.call for r in found["refusals"]} >= {"open", "socket"}


def test_doctor_reports_the_sandbox():
    out = run_cli("doctor", "--json")
    assert out.returncode == 0, out.stderr
    finding = json.loads(out.stdout)["sandbox"]
    assert finding["detail"].startswith(("sandboxed", "unconfined"))
    assert finding["ok"] == (landlock.abi() > 0 and "unconfined" not in finding["detail"])


def test_describe_names_what_held():
    full = sandbox.describe("notify", 7, {"files", "tcp", "scopes"}, 20)
    assert not full.unconfined and full.summary() == "sandboxed (Landlock, seccomp)"
    bare = sandbox.describe("", 0, set(), 20)
    assert bare.unconfined == ("files", "network", "processes")
    assert bare.summary().startswith("unconfined files, network, processes: this kernel offers no Landlock")
    old = sandbox.describe("errno", 3, {"files"}, 20)
    assert not old.unconfined and "TCP" not in old.network and "refusals reported" not in old.network
