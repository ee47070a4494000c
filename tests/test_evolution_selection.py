"""Population, niches, selection, islands and operator scheduling: pure, seeded, CPU only."""
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from kernelevo.evolution import islands, niches, scheduling, selection
from kernelevo.evolution.population import Population, beats, best_of
from kernelevo.evaluation import faster_beyond_noise
from kernelevo.evolution.scheduling import OperatorStats
from conftest import variant_of

CANDIDATES = Path(__file__).resolve().parent.parent / "benchmarks" / "tasks" / "candidates"


def refigured(m, baseline: str | None = None, **changes):
    """The member with some of the judge's figures changed (and its run's baseline, where given)."""
    m = replace(m, figures=replace(m.figures, **changes))
    return replace(m, baseline=baseline) if baseline else m


def member(kid, speed=1.0, verdict="ok", niche="L1", island=0, operator="mutate", parents=(),
           generation=0, source=None):
    return variant_of(source if source is not None else f"// kernel {kid}\n", "nvrtc", kernel_id=kid,
                      operator=operator, parents=tuple(parents), island=island, generation=generation,
                      verdict=verdict, speedup_eager=speed if verdict == "ok" else None, niche=niche)


# --- population ---------------------------------------------------------------------------

def test_member_is_frozen_and_hashable():
    m = member(1)
    assert hash(m) == hash(member(1)) and {m, member(1)} == {m}
    with pytest.raises(AttributeError):
        m.figures = None  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.figures.verdict = "incorrect"  # type: ignore[misc]
    assert m.ok and m.fitness == 1.0
    failed = member(2, verdict="incorrect")
    assert not failed.ok and failed.fitness == 0.0
    assert replace(m, figures=replace(m.figures, speedup_eager=None)).fitness == 0.0


def test_population_views_and_migrant_copies():
    pop = Population([member(1, 1.5, niche="L1"), member(2, 2.5, niche="L2-smem", island=1),
                      member(3, 3.0, verdict="runtime_error"), member(4, 2.0, niche="L1")])
    assert pop.best().kernel_id == 2
    assert [m.kernel_id for m in pop.correct()] == [1, 2, 4]
    assert {k: m.kernel_id for k, m in pop.elites().items()} == {"L1": 4, "L2-smem": 2}
    assert pop.get(3).figures.verdict == "runtime_error" and pop.get(99) is None
    pop.migrate_in(2, 0)  # a copy on island 0; island 1 keeps it
    assert {m.kernel_id for m in pop.by_island(0)} == {1, 2, 3, 4}
    assert [m.kernel_id for m in pop.by_island(1)] == [2]
    assert len(pop) == 4 and len(pop.members) == 4  # counted once
    assert pop.get(2).lineage.island == 1  # the home record
    assert pop.best(island=0).kernel_id == 2
    one = pop.get(1)
    pop.add(replace(one, figures=replace(one.figures, speedup_eager=9.0)))  # same id and island: an update
    assert pop.get(1).figures.speedup_eager == 9.0 and len(pop) == 4


def test_faster_beyond_noise_needs_intervals_apart():
    assert faster_beyond_noise(1.7, (1.61, 1.8), 1.5, (1.4, 1.6))
    assert not faster_beyond_noise(1.7, (1.6, 1.8), 1.5, (1.4, 1.6))  # touching: within the noise
    assert not faster_beyond_noise(1.78, (1.52, 2.05), 1.5, (1.4, 1.6))  # a higher median inside the noise
    assert faster_beyond_noise(1.51, None, 1.5, (1.4, 1.6))  # an interval unknown: the median decides
    assert not faster_beyond_noise(1.5, None, 1.5, None)
    assert faster_beyond_noise(0.5, (0.4, 0.6), None, None) and not faster_beyond_noise(None, None, 1.0, None)


def test_best_does_not_flip_inside_the_noise():
    a = refigured(member(1, 1.50), speedup_eager_ci=(1.40, 1.60))
    b = refigured(member(2, 1.58), speedup_eager_ci=(1.50, 1.66))  # faster median, overlapping interval
    c = refigured(member(3, 1.75), speedup_eager_ci=(1.65, 1.85))  # clear of a's interval
    d = refigured(member(4, 1.80), speedup_eager_ci=(1.70, 1.90))  # inside c's noise
    assert not beats(b, a) and beats(c, a) and not beats(d, c) and not beats(a, c)
    assert best_of([a, b]) is a  # the incumbent stays the one to beat
    assert best_of([a, b, c, d]) is c and best_of([a, c, b, d]) is c
    assert best_of([b, a]) is b  # whoever came first holds until beaten beyond the noise
    pop = Population([a, b])
    assert pop.best().kernel_id == 1 and pop.elites()["L1"].kernel_id == 1
    pop.add(c)
    pop.add(d)
    assert pop.best().kernel_id == 3 and pop.best(island=0).kernel_id == 3 and pop.elites()["L1"].kernel_id == 3
    # without intervals: the fastest, the older on equal speed (the rule before intervals)
    assert best_of([member(5, 1.2), member(6, 1.3), member(7, 1.3)]).kernel_id == 6
    assert best_of([member(8, verdict="incorrect"), refigured(member(9), speedup_eager=None)]).kernel_id == 9


def test_a_kernel_that_beats_eager_but_not_the_compiler_loses_to_one_that_beats_the_compiler():
    """Fitness is the speedup over the run's baseline: against torch.compile (the default), the kernel
    at 2.0x eager but 0.9x torch.compile loses to the one at 1.5x eager and 1.1x torch.compile; against
    eager it is the other way round. Eager ranks where torch.compile gave no figure."""
    fast_eager = refigured(member(1), speedup_eager=2.0, speedup_eager_ci=(1.9, 2.1), speedup_compile=0.9,
                         speedup_compile_ci=(0.85, 0.95), baseline="compile")
    beats_compile = refigured(member(2), speedup_eager=1.5, speedup_eager_ci=(1.45, 1.55), speedup_compile=1.1,
                            speedup_compile_ci=(1.05, 1.15), baseline="compile")
    assert (fast_eager.against, fast_eager.fitness, fast_eager.fitness_ci) == ("compile", 0.9, (0.85, 0.95))
    assert best_of([fast_eager, beats_compile]) is beats_compile and beats(beats_compile, fast_eager)
    assert Population([fast_eager, beats_compile]).best().kernel_id == 2
    eager = [replace(m, baseline="eager") for m in (fast_eager, beats_compile)]
    assert best_of(eager) is eager[0] and eager[0].fitness == 2.0 and eager[0].fitness_ci == (1.9, 2.1)
    unmeasured = refigured(beats_compile, speedup_compile=None, speedup_compile_ci=None)
    assert unmeasured.against == "eager" and unmeasured.fitness == 1.5
    assert refigured(fast_eager, verdict="incorrect").fitness == 0.0


# --- niches -------------------------------------------------------------------------------

def test_describe_real_candidates():
    softmax = niches.describe((CANDIDATES / "row_softmax__nvrtc.py").read_text(), "nvrtc")
    assert softmax == {"launches": 1, "shared_memory": True, "tensor_cores": False, "vector_io": True,
                       "torch_ops": False}
    assert niches.niche_key(softmax) == "L1-smem-vec"
    # two launches per forward: split reduction, then the finishing pass
    assert niches.describe((CANDIDATES / "sum_reduction__nvrtc.py").read_text(), "nvrtc")["launches"] == 2
    assert niches.describe((CANDIDATES / "sum_reduction__inline.py").read_text(), "inline")["launches"] == 2
    # a vectorised launch and its scalar fallback in if/else are one launch, in Python and in C++
    assert niches.describe((CANDIDATES / "diag_matmul__nvrtc.py").read_text(), "nvrtc")["launches"] == 1
    assert niches.describe((CANDIDATES / "layernorm__inline.py").read_text(), "inline")["launches"] == 1
    conv = niches.describe((CANDIDATES / "conv2d_relu__nvrtc.py").read_text(), "nvrtc")  # dynamic smem
    assert conv["launches"] == 1 and conv["shared_memory"]
    c = niches.describe((CANDIDATES / "layernorm__c.py").read_text(), "c")
    assert niches.niche_key(c) == "L1"
    # Triton launches are name[grid](...) of its @triton.jit functions; a kernel's own tl.load is no build
    triton = {name: niches.describe((CANDIDATES / f"{name}__triton.py").read_text(), "triton")
              for name in ("layernorm", "sum_reduction", "gemm_bias_gelu")}
    assert [t["launches"] for t in triton.values()] == [1, 2, 1]
    assert not triton["gemm_bias_gelu"]["tensor_cores"]  # tl.dot in IEEE fp32: no tensor cores
    bf16 = (CANDIDATES / "gemm_bias_gelu__triton.py").read_text().replace(', input_precision="ieee"', "")
    assert niches.niche_key(niches.describe(bf16, "triton")) == "L1-tc"
    assert not niches.describe(bf16.replace("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b, acc, allow_tf32=False)"),
                               "triton")["tensor_cores"]
    # a kernel kept on the class as a static method, launched through self, with a tl.load of its own
    static = """
import torch, triton, triton.language as tl
class ModelNew(torch.nn.Module):
    @staticmethod
    @triton.jit
    def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, x, mask=offs < n)

    def forward(self, x):
        y = torch.empty_like(x)
        self._copy[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""
    assert niches.describe(static, "triton")["launches"] == 1


HYBRID = '''
import torch
import torch.nn.functional as F
from kernelevo import runtime

SRC = r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void gelu(const __half2* x, __half2* y, int n) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
}
"""
_mod = runtime.load_cuda(SRC)

def _post(y):
    for _ in range(2):
        _mod.gelu(1, 256, y, y, y.numel())  # in a loop: many launches
    return y

class ModelNew(torch.nn.Module):
    def forward(self, x, w):
        y = torch.matmul(x, w)  # cuBLAS does the GEMM
        return self._finish(y)

    def _finish(self, y):
        return _post(y)
'''


def test_describe_hybrid_follows_helpers_and_loops():
    d = niches.describe(HYBRID, "nvrtc")
    assert d["torch_ops"] and d["tensor_cores"] and d["vector_io"] and not d["shared_memory"]
    assert d["launches"] >= 3
    assert niches.niche_key(d) == "L3+-tc-vec-torch"
    # the judge's evidence overrides the static guess
    assert not niches.describe(HYBRID, "nvrtc", {"torch_compute": [], "launches": 2})["torch_ops"]


@pytest.mark.parametrize("text", ["", "def forward(:\n  <<< {{ ((", "\x00\xff" * 50, "}" * 100 + "{" * 5000,
                                  "class ModelNew:\n def forward(self): return self.forward()"])
def test_describe_never_raises(text):
    d = niches.describe(text, "inline")
    assert set(d) == {"launches", "shared_memory", "tensor_cores", "vector_io", "torch_ops"}
    assert niches.niche_key(d).startswith("L")


def test_niche_key_is_stable():
    assert niches.niche_key({"launches": 5, "vector_io": True, "shared_memory": True}) == "L3+-smem-vec"
    assert niches.niche_key({}) == "L0"


# --- selection ----------------------------------------------------------------------------

def test_tournament_is_deterministic_and_prefers_fast():
    pop = [member(i, speed=i / 10) for i in range(1, 21)]
    a = [selection.tournament(pop, random.Random(7)).kernel_id for _ in range(5)]
    b = [selection.tournament(pop, random.Random(7)).kernel_id for _ in range(5)]
    assert a == b
    rng = random.Random(1)
    wins = [selection.tournament(pop, rng, k=3).kernel_id for _ in range(2000)]
    assert sum(wins) / len(wins) > 13  # uniform would average 10.5
    assert selection.tournament(pop, rng, k=100).kernel_id == 20


def test_mutate_parent_is_one_of_the_best_and_the_less_tried_is_likelier():
    pop = [member(i, 1.0 + i / 10, niche=f"n{i % 2}") for i in range(1, 9)] + [member(20, 0.29, niche="slow")]
    rng = random.Random(3)
    untried = Counter(selection.pick_mutate_parent(pop, {}, rng).kernel_id for _ in range(6000))
    assert set(untried) == {8, 7, 6}  # the three fastest only: never the 0.29x kernel
    assert all(1700 < n < 2300 for n in untried.values())
    tried = Counter(selection.pick_mutate_parent(pop, {8: 3}, rng).kernel_id for _ in range(6000))
    # weights 1/4, 1, 1: the best, tried three times, gets about a ninth of the draws
    assert 450 < tried[8] < 900 and tried[7] > 2 * tried[8]
    tuned = [replace(m, source="#define B 64  // tune: 64 128\n") for m in pop[:2]]
    assert selection.pick_mutate_parent(tuned, {}, rng).kernel_id == 2  # a kernel and its tune variant: once
    with pytest.raises(ValueError):
        selection.pick_mutate_parent([member(1, verdict="compile_error")], {}, rng)


def test_crossover_prefers_distinct_niches():
    pop = [member(i, 1.0 + i / 10, niche="L1-vec") for i in range(1, 9)] + [member(20, 0.5, niche="L2-smem"),
                                                                             member(21, 3.0, verdict="incorrect", niche="L3+")]
    rng = random.Random(11)
    for _ in range(200):
        a, b = selection.pick_crossover_parents(pop, rng)
        assert {a.lineage.niche, b.lineage.niche} == {"L1-vec", "L2-smem"}
    single_niche = [m for m in pop if m.lineage.niche == "L1-vec"]
    picks = selection.pick_crossover_parents(single_niche, rng, n=3)
    assert len({m.kernel_id for m in picks}) == 3
    assert selection.pick_crossover_parents(pop[:1], rng) == pop[:1]


def test_reflect_variants_span_speedups_with_distinct_sources():
    pop = [member(i, speed=i * 0.25, source=f"k{i}") for i in range(1, 21)]
    pop.append(member(30, speed=5.0, source="k20"))  # same source as kernel 20, faster copy
    pop.append(member(31, verdict="incorrect", source="bad"))
    picks = selection.pick_reflect_variants(pop, random.Random(5), k=4)
    speeds = [m.figures.speedup_eager for m in picks]
    assert speeds[0] == 5.0 and speeds == sorted(speeds, reverse=True)
    assert len({m.source for m in picks}) == 4 and all(m.ok for m in picks)
    assert min(speeds) <= 1.5  # reaches the slow end, not four near-copies of the top
    assert picks == selection.pick_reflect_variants(pop, random.Random(5), k=4)


def test_repair_target_rules():
    pop = [
        member(1, 1.2, operator="translate"),
        member(2, verdict="compile_error", operator="mutate", parents=[1], generation=3),
        member(3, verdict="timeout", operator="mutate", parents=[1], generation=4),  # not fixable
        member(4, verdict="incorrect", operator="repair", parents=[2], generation=4),  # failed repair
        member(5, verdict="runtime_error", operator="translate", generation=0),
        member(6, verdict="incorrect", operator="mutate", parents=[2], generation=5),  # parent failed
    ]
    rng = random.Random(0)
    # kernel 2 was repaired (by 4) already; 4's and 6's parents failed; 3 timed out: only 5 remains
    assert {selection.pick_repair_target(pop, rng).kernel_id for _ in range(20)} == {5}
    assert selection.pick_repair_target(pop[:1], rng) is None
    fresh = [member(1), member(7, verdict="compile_error", parents=[1], generation=9)]
    assert selection.pick_repair_target(fresh, rng).kernel_id == 7
    tuned = [member(1), member(8, verdict="compile_error", operator="tune", parents=[1], generation=9)]
    assert selection.pick_repair_target(tuned, rng) is None  # the constant tune chose failed, not the model


# --- islands ------------------------------------------------------------------------------

def test_assign_island_round_robin():
    assert [islands.assign_island(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert islands.assign_island(5, 1) == 0


def test_migrate_ring_every_n_generations():
    pop = Population([member(1, 1.0, island=0), member(2, 2.0, island=0), member(3, 3.0, island=1),
                      member(4, 9.0, verdict="incorrect", island=2)])
    rng = random.Random(0)
    assert islands.migrate(pop, 3, rng, generation=2, every=3) == []
    assert islands.migrate(pop, 3, rng, generation=0, every=3) == []
    moves = islands.migrate(pop, 3, rng, generation=3, every=3)
    assert moves == [(2, 1), (3, 2)]  # island 2 has no correct kernel to send
    for kid, to in moves:
        pop.migrate_in(kid, to)
    # next time each island sends its best that the next one lacks: island 0's best (2) is on
    # island 1 already, so 1 goes; island 1 holds 3 and migrant 2, and 3 is on island 2 already
    assert islands.migrate(pop, 3, rng, generation=6, every=3) == [(1, 1), (2, 2), (3, 0)]
    assert islands.migrate(pop.members, 1, rng, generation=3) == []
    plain_list = islands.migrate([member(1, 1.0, island=0), member(3, 3.0, island=1)], 2, rng, generation=3)
    assert plain_list == [(1, 1), (3, 0)]


# --- scheduling ---------------------------------------------------------------------------

def test_translate_until_correct_and_a_failed_translation_is_repaired_before_another():
    rng = random.Random(0)
    stats = {"mutate": OperatorStats(10, 5, 5, 0.1)}
    for _ in range(50):
        assert scheduling.choose_operator(stats, False, 0, False, True, rng) == "translate"
        assert scheduling.choose_operator(stats, False, 0, True, True, rng) == "repair"


def test_eligibility_rules():
    rng = random.Random(1)
    one = {scheduling.choose_operator({}, True, 1, False, False, rng) for _ in range(500)}
    assert one == {"translate", "mutate"}
    many = {scheduling.choose_operator({}, True, 3, True, True, rng) for _ in range(2000)}
    assert many == set(scheduling.OPERATORS)
    no_tune = {scheduling.choose_operator({}, True, 3, True, True, rng, base_weights={"tune": 0}) for _ in range(500)}
    assert "tune" not in no_tune


def test_bandit_shifts_to_improvement_per_dollar():
    stats = {
        "mutate": OperatorStats(attempts=20, successes=15, improvements=8, cost_usd=0.4),
        "crossover": OperatorStats(attempts=20, successes=10, improvements=1, cost_usd=0.8),
        "reflect": OperatorStats(attempts=20, successes=10, improvements=8, cost_usd=4.0),  # same rate, 10x price
    }
    rng = random.Random(2)
    counts = Counter(scheduling.choose_operator(stats, True, 5, False, False, rng) for _ in range(5000))
    assert counts["mutate"] > 2 * counts["reflect"] and counts["mutate"] > 3 * counts["crossover"]
    assert min(counts.values()) > 50  # the exploration floor: nobody starves
    p = scheduling.operator_weights(stats, ["repair", "mutate", "crossover", "reflect"])
    assert sum(p.values()) == pytest.approx(1.0)
    # an untried operator starts at the prior: between the best and the worst
    assert p["crossover"] < p["repair"] < p["mutate"]


def test_tune_is_cheap_but_its_failures_count():
    fresh = scheduling.operator_weights({}, ["mutate", "tune"])
    assert fresh["tune"] > fresh["mutate"]  # same prior rate, a fifth of the cost
    tired = scheduling.operator_weights({"tune": OperatorStats(attempts=40, successes=40, improvements=0)},
                                        ["mutate", "tune"])
    assert tired["tune"] < tired["mutate"]
    s = OperatorStats().record(True, False, 0.01).record(False, False, None)
    assert (s.attempts, s.successes, s.improvements, s.cost_usd) == (2, 1, 0, 0.01)


TORCH_BASE = '''
import math
import torch
import torch.nn.functional as F
from kernelevo import runtime
_mod = runtime.load_cuda(SRC)
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
    def forward(self, x):
        {body}
        _mod.k(1, 1, x)
        return x
'''


@pytest.mark.parametrize("body, expected", [
    ("y = self.linear(x)", True), ("y = x.float().matmul(x)", True), ("y = F.softmax(x, -1)", True),
    ("y = torch.empty_like(x); n = math.prod(x.shape)", False), ("y = x.contiguous().view(-1)", False),
    ("torch.cuda.synchronize()", False),
])
def test_torch_ops_counts_compute_not_glue(body, expected):
    assert niches.describe(TORCH_BASE.format(body=body), "nvrtc")["torch_ops"] is expected


# --- spending replies where they pay -------------------------------------------------------

def test_crossover_avoids_pairs_already_crossed_or_in_flight():
    pool = [member(1, 2.0, niche="L1"), member(2, 1.5, niche="L2-smem"), member(3, 1.2, niche="L1-vec")]
    rng = random.Random(0)
    avoid = {frozenset({1, 2}), frozenset({1, 3})}
    for _ in range(20):
        picked = selection.pick_crossover_parents(pool, rng, avoid=avoid)
        assert frozenset(m.kernel_id for m in picked) == {2, 3}
    every = {frozenset({1, 2}), frozenset({1, 3}), frozenset({2, 3})}
    assert selection.pick_crossover_parents(pool, rng, avoid=every) == []


def test_tune_only_the_fastest_kernels_of_each_island():
    tunable = [member(1, 3.0), member(2, 2.5), member(3, 0.7), member(4, 0.4),
               member(5, 1.1, island=1), member(6, 0.9, island=1), member(7, 0.3, island=1),
               member(8, 9.0, verdict="incorrect")]
    seen = set()
    for seed in range(30):
        order = selection.tune_parents(tunable, random.Random(seed))
        assert {m.kernel_id for m in order} == {1, 2, 5, 6}
        seen.add(order[0].kernel_id)
    assert seen == {1, 2, 5, 6}  # each of them comes first now and then


def test_translate_again_only_to_seed_an_empty_or_collapsed_island():
    assert islands.needing_seed([], 2) == 0
    working = [member(1, 1.5, island=0), member(2, 1.2, island=1)]
    assert islands.needing_seed(working, 2) is None
    assert islands.needing_seed(working[:1], 2) == 1  # island 1 has no correct kernel
    failing = [member(10 + i, verdict="incorrect", island=1) for i in range(islands.COLLAPSE_AFTER)]
    assert islands.needing_seed(working + failing, 2) == 1  # its last children all failed
    assert islands.needing_seed(working + failing[:-1], 2) is None
    tuned = [member(20 + i, verdict="compile_error", operator="tune", island=1) for i in range(islands.COLLAPSE_AFTER)]
    assert islands.needing_seed(working + tuned, 2) is None  # tune variants failing: no reason to translate again
    assert scheduling.eligible_operators(True, 2, False, False, translate_ok=False) == \
        ["mutate", "crossover", "reflect"]
    rng = random.Random(0)
    picks = {scheduling.choose_operator({}, True, 2, False, False, rng, translate_ok=False) for _ in range(200)}
    assert "translate" not in picks


def test_crossover_and_reflect_see_a_kernel_and_its_tune_variants_as_one():
    base = "#define BLOCK 256  // tune: 128 256 512\n__global__ void k() {}\n"
    other = "#define ROWS 4  // tune: 2 4 8\n__global__ void other() {}\n"
    pool = [member(1, 2.0, source=base), member(2, 2.1, source=base.replace("BLOCK 256", "BLOCK 512")),
            member(3, 1.2, source=other), member(4, 1.0, source=base.replace("BLOCK 256", "BLOCK 128"))]
    for seed in range(10):
        picked = selection.pick_crossover_parents(pool, random.Random(seed))
        assert {m.kernel_id for m in picked} == {2, 3}  # the fastest of the tune family, and the other kernel
    assert [m.kernel_id for m in selection.pick_reflect_variants(pool, random.Random(0))] == [2, 3]
    # what the search draws operators by: one kernel and its tune variants leave nothing to cross or
    # contrast (a real run drew reflect there, and the operator refused its one variant)
    family = [m for m in pool if m.kernel_id != 3]
    assert selection.approaches(family) == 1 and selection.approaches(pool) == 2
    assert "reflect" not in scheduling.eligible_operators(True, selection.approaches(family), False, True)
