"""Tunable markup and the tune operator's variants, on a real kernel source."""
import random
from pathlib import Path

from kernelevo.evolution.tune import Tunable, apply, has_tunables, tune_variants, tunables
from conftest import variant_of

CANDIDATES = Path(__file__).resolve().parent.parent / "benchmarks" / "tasks" / "candidates"
PLAIN = (CANDIDATES / "gemm_bias_gelu__nvrtc.py").read_text()
MARKED = (PLAIN.replace("#define BM 64      // output rows per block",
                        "#define BM 64      // tune: 32 64 128 // output rows per block")
          .replace("#define BK 16      // K-slice staged in shared memory per step",
                   "#define BK 16  // tune: 8, 16,32")
          .replace("#define TM 4       // output rows per thread", "#define TM 4       // tune: 4"))


def test_no_markup_no_variants():
    assert tunables(PLAIN) == []
    assert not has_tunables(PLAIN)
    assert tune_variants(PLAIN, random.Random(0)) == []
    assert tune_variants("", random.Random(0)) == []


def test_tunables_parsed():
    found = tunables(MARKED)
    line_bm = MARKED.splitlines().index("#define BM 64      // tune: 32 64 128 // output rows per block") + 1
    assert found[0] == Tunable("BM", "64", ("32", "64", "128"), line_bm)
    assert found[1].name == "BK" and found[1].choices == ("8", "16", "32")
    assert found[2] == Tunable("TM", "4", ("4",), found[2].line)  # nothing else to try
    assert has_tunables(MARKED)


def test_variants_change_only_define_lines():
    variants = tune_variants(MARKED, random.Random(1), limit=4)
    assert len(variants) == 4
    assert len({src for src, _ in variants}) == 4
    original = MARKED.splitlines(keepends=True)
    choices = {t.name: t for t in tunables(MARKED)}
    for src, change in variants:
        assert 1 <= len(change) <= 2 and set(change) <= {"BM", "BK"}
        lines = src.splitlines(keepends=True)
        assert len(lines) == len(original)
        diff = [i for i, (a, b) in enumerate(zip(original, lines)) if a != b]
        assert [i + 1 for i in diff] == sorted(choices[n].line for n in change)
        for name, value in change.items():
            t = choices[name]
            assert value in t.choices and value != t.value
            new_line = lines[t.line - 1]
            assert new_line == original[t.line - 1].replace(f"{name} {t.value}", f"{name} {value}", 1)
        assert {t.name: t.value for t in tunables(src)} == {"BM": "64", "BK": "16", "TM": "4", **change}


def test_all_variants_enumerated_and_deterministic():
    everything = tune_variants(MARKED, random.Random(2), limit=100)
    # BM: 2 alternatives, BK: 2 alternatives -> 4 singles + 4 pairs
    assert len(everything) == 8
    assert sorted(len(c) for _, c in everything) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert tune_variants(MARKED, random.Random(3)) == tune_variants(MARKED, random.Random(3))


def test_apply_keeps_layout_and_crlf():
    src = "x\r\n#define BLOCK 256   // tune: 128 256\r\ny\r\n"
    assert apply(src, {"BLOCK": "128"}) == "x\r\n#define BLOCK 128   // tune: 128 256\r\ny\r\n"
    assert tunables(src)[0].choices == ("128", "256")
    assert apply(src, {"OTHER": "1"}) == src


def test_many_tunables_are_sampled():
    src = "".join(f"#define T{i} 1 // tune: {' '.join(str(v) for v in range(1, 60))}\n" for i in range(12))
    variants = tune_variants(src, random.Random(4), limit=6)
    assert len(variants) == 6 and len({s for s, _ in variants}) == 6


def test_exclude_skips_known_variants():
    everything = tune_variants(MARKED, random.Random(2), limit=100)
    known = {src for src, _ in everything[:5]}
    rest = tune_variants(MARKED, random.Random(9), limit=100, exclude=known)
    assert len(rest) == 3 and not known & {src for src, _ in rest}


def test_a_kernel_its_profile_calls_far_from_the_bound_is_not_tuned():
    """Below FAR % of the speed of light the profile says to change the approach, not constants:
    tune leaves the kernel to new replies; near the bound, or not yet profiled, it is tuned."""
    from kernelevo.agent.profile_block import FAR
    from kernelevo.evaluation import Profile, SpeedOfLight
    from kernelevo.evolution.loop.planning import _tunable

    def profiled(pct):
        sol = SpeedOfLight(flops=0.0, bytes=1 << 20, dtype="float32", peak_flops=1e12, peak_bytes=1e12,
                           bound="memory", bound_ms=0.01, candidate_pct=pct)
        return Profile(device_name="gpu", sol=sol)

    m = variant_of(kernel_id=7, source=MARKED, format="nvrtc", operator="mutate", parents=(), island=0, generation=0,
                verdict="ok", speedup_eager=1.2, niche="L1")
    assert _tunable(m, {}) and _tunable(m, {7: profiled(FAR + 40)})
    assert not _tunable(m, {7: profiled(FAR - 10)})
