"""Several models in one run: the per-operator bandit over models, pins, drop-outs, and the
statistics it reads, rebuilt from archive rows."""
import dataclasses
import random

import pytest
from kernelevo.agent.client import Stop
from kernelevo.agent.models import lookup
from kernelevo.agent.providers import parse_model
from kernelevo.archive.rows import by_model
from kernelevo.archive.store import Archive
from kernelevo.config import ConfigError, load_config
from kernelevo.evolution import ensemble as ensembles
from kernelevo.evolution.scheduling import MODEL_EXPLORE, OperatorStats, choose_model, model_weights
from kernelevo.evaluation import Evaluation
from kernelevo.llm_call import LLMCall

PRICES = {"cheap": 0.01, "dear": 0.04}


def test_before_any_call_the_table_price_decides():
    p = model_weights({}, {}, PRICES)
    assert p["cheap"] > p["dear"] and sum(p.values()) == pytest.approx(1.0)
    assert p["cheap"] == pytest.approx((1 - MODEL_EXPLORE) * 0.8 + MODEL_EXPLORE / 2)  # 4x cheaper: 4/5 of the rest


def test_improvements_per_dollar_outweigh_the_price():
    """The dear model improves its kernels, the cheap one never does: the dear one wins its calls, and
    no model starves (the exploration floor)."""
    overall = {"cheap": OperatorStats(attempts=10, successes=6, improvements=0, cost_usd=0.1),
               "dear": OperatorStats(attempts=6, successes=5, improvements=4, cost_usd=0.24)}
    p = model_weights(overall, overall, PRICES)
    assert p["dear"] > 0.6 and p["cheap"] >= MODEL_EXPLORE / 2


def test_a_model_untried_on_an_operator_starts_from_what_it_earns_elsewhere():
    overall = {"cheap": OperatorStats(attempts=12, successes=4, improvements=0, cost_usd=0.12),
               "dear": OperatorStats(attempts=12, successes=8, improvements=6, cost_usd=0.48)}
    p = model_weights({}, overall, PRICES)  # neither has made a reflect call yet
    assert p["dear"] > p["cheap"]
    good_at_reflect = {"cheap": OperatorStats(attempts=4, successes=3, improvements=3, cost_usd=0.04)}
    assert model_weights(good_at_reflect, overall, PRICES)["cheap"] > p["cheap"]  # its own record counts more


def test_a_model_whose_kernels_never_pass_loses_its_calls():
    """Against a third of the price: a model with 15 correct kernels and 3 improvements in 18
    attempts takes most calls from one with none correct, on the operator where it was seen and on
    one neither has tried (a kernel that does not compile can never improve)."""
    prices = {"careful": 0.03, "hasty": 0.01}
    seen = {"careful": OperatorStats(attempts=18, successes=15, improvements=3, cost_usd=0.54),
            "hasty": OperatorStats(attempts=18, successes=0, cost_usd=0.18)}
    assert model_weights({}, {}, prices)["hasty"] > 0.7  # the price prior alone
    assert model_weights(seen, seen, prices)["careful"] > 0.65
    assert model_weights({}, seen, prices)["careful"] > 0.65


def test_unknown_costs_count_at_the_table_price_and_free_models_do_not_take_everything():
    unknown = {"cheap": OperatorStats(attempts=8, successes=4, improvements=1, unknown_costs=8),
               "dear": OperatorStats(attempts=8, successes=4, improvements=1, cost_usd=0.32)}
    p = model_weights(unknown, unknown, PRICES)
    assert p["cheap"] == pytest.approx(model_weights({}, {}, PRICES)["cheap"], abs=0.02)  # as if it paid its price
    free = model_weights({}, {}, {"free": 0.0, "dear": 0.04})
    assert free["dear"] >= MODEL_EXPLORE / 2 and free["free"] < 1.0


def _simulated_run(seed: int, calls: int = 80) -> list[str]:
    """'sloppy' is half the price of 'good' but improves 1 attempt in 30 against 1 in 3."""
    rng, outcomes = random.Random(seed), random.Random(-seed - 1)
    rate, price = {"good": 1 / 3, "sloppy": 1 / 30}, {"good": 0.02, "sloppy": 0.01}
    stats = {m: OperatorStats() for m in price}
    chosen = []
    for _ in range(calls):
        m = choose_model(stats, stats, price, rng)
        chosen.append(m)
        stats[m] = stats[m].record(True, outcomes.random() < rate[m], price[m])
    return chosen


def test_the_bandit_shifts_calls_to_the_model_that_pays():
    """100 simulated runs of 80 calls: the first calls lean to the cheaper model (the price prior),
    the last 40 go mostly to the one whose improvements per dollar are 5x higher (about 70 %: the
    draws follow the estimates, whose pseudo-counts keep the other model's chance open). Single runs
    are noisy (a few unlucky early draws), so the claim is about the 100."""
    runs = [_simulated_run(seed) for seed in range(100)]
    first = sum(r[:3].count("sloppy") for r in runs) / 300
    last = sum(r[-40:].count("good") for r in runs) / 4000
    assert first > 0.55 and last > 0.65
    assert sum(r[-40:].count("good") > 20 for r in runs) >= 90


class FakeLLM:
    """An LLM's face as the ensemble sees it: a price and a pause (the real client needs a server)."""

    def __init__(self, paused=0.0):
        self.info = lookup(parse_model("openai:m"), dict(input=1.0, output=4.0))
        self.paused, self.on_call = paused, None

    def paused_for(self):
        return self.paused


def test_pins_fall_back_and_pausing_models_wait():
    members = {"fast": FakeLLM(), "smart": FakeLLM(), "judge": FakeLLM()}
    e = ensembles.Ensemble(members, pins={"reflect": "judge"}, general=["fast", "smart"])
    rng = random.Random(0)
    assert {e.choose("reflect", rng) for _ in range(20)} == {"judge"}
    assert {e.choose("mutate", rng) for _ in range(40)} == {"fast", "smart"}  # a pin-only model makes no other call
    assert e.drop("judge", "refused") and not e.drop("judge", "again")  # said once
    assert e.eligible("reflect") == ["fast", "smart"]
    members["fast"].paused = 5.0
    assert {e.choose("mutate", rng) for _ in range(20)} == {"smart"}  # a paused model waits while another can go
    e.drop("smart", "gone")
    assert e.choose("mutate", rng) == "fast" and e.active == ["fast"]  # the last one left, paused or not
    e.drop("fast", "gone")
    assert e.choose("mutate", rng) is None and e.labels == ["fast", "smart", "judge"]


def test_build_leaves_out_a_model_without_its_key(tmp_path, monkeypatch):
    config_file = tmp_path / "kernelevo.toml"
    config_file.write_text('ensemble = ["a", "b"]\n[models.a]\nmodel = "openai:m-a"\n'
                           '[models.b]\nmodel = "anthropic:m-b"\nkey_env = "NO_SUCH_KEY"\n[model_for]\nreflect = "b"\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    config = load_config(config_file)
    assert config.ensemble() == ("a", "b") and config.model_for() == {"reflect": "b"}
    said = []
    e = ensembles.build(config, config.ensemble(), config.model_for(), (12000, 6000), said.append)
    assert e.active == ["a"] and "NO_SUCH_KEY is not set" in e.dropped["b"] and e.pins == {}
    assert said == [f"model b left out of the ensemble: {e.dropped['b']}"]
    with pytest.raises(Stop, match="NO_SUCH_KEY"):
        ensembles.build(config, ["b"], {}, (12000, 6000))
    with pytest.raises(ValueError, match="operators that call a model"):
        ensembles.build(config, ["a"], {"tune": "a"}, (12000, 6000))
    (tmp_path / "bad.toml").write_text('ensemble = "a"\n')
    with pytest.raises(ConfigError, match="ensemble must be a list"):
        load_config(tmp_path / "bad.toml")
    (tmp_path / "list.toml").write_text('models = ["a", "b"]\n')  # the alias table's name, given a list
    with pytest.raises(ConfigError, match=r"list a run's models as ensemble = \["):
        load_config(tmp_path / "list.toml")


def test_statistics_come_back_from_the_rows(tmp_path):
    """What the bandit reads after a resume: per operator and model, attempts, cost (unknown ones
    apart), correct and own improvements; a parent marked for its child's improvement is not one."""
    with Archive.open(tmp_path / "a.sqlite") as archive:
        task = archive.add_task("t", "src", "h")
        run = archive.start_run(task, {}, 0, "cpu", "", "", "")

        def attempt(label, operator, cost, verdict=None, parents=(), followup=False):
            call = archive.add_llm_call(run, LLMCall(provider="openai", model="m", operator=operator, outcome="ok",
                                                     cost_usd=cost, label=label))
            if followup:  # an edit follow-up counts for its operator; the kernel points at the last call
                call = archive.add_llm_call(run, LLMCall(provider="openai", model="m", operator=f"{operator}_edit_followup",
                                                         outcome="ok", cost_usd=cost, label=label))
            kid = archive.add_kernel(task, f"k{call}", "c", operator, run_id=run, parents=parents, llm_call_id=call)
            if verdict:
                archive.add_evaluation(kid, Evaluation(verdict, "", ""), run_id=run)
            return kid

        a = attempt("good", "translate", 0.01, "ok")
        archive.mark_stepping_stone(a, "new best of island 0")
        b = attempt("good", "mutate", 0.02, "ok", parents=(a,), followup=True)
        archive.mark_stepping_stone(b, "new best of island 0")
        archive.mark_stepping_stone(a, "new best of island 0", via=b)  # a keeps its own reason
        attempt("sloppy", "mutate", None, "compile_error", parents=(a,))
        c = attempt("sloppy", "mutate", 0.005, "ok", parents=(a,))
        archive.mark_stepping_stone(c, "opened niche x")
        archive.add_llm_call(run, LLMCall(provider="openai", model="m", operator="mutate", outcome="auth",
                                          cost_usd=0.0, label="sloppy"))  # a refused call writes no kernel
        rows = archive.model_yield(run)
        kernel_rows = archive.kernels(run_id=run)
    per, overall = ensembles.stats_from_rows(rows)
    assert per[("mutate", "good")] == OperatorStats(attempts=1, successes=1, improvements=1, cost_usd=0.04)
    assert per[("mutate", "sloppy")] == OperatorStats(attempts=2, successes=1, improvements=1, cost_usd=0.005,
                                                      unknown_costs=1)
    assert overall["good"] == OperatorStats(attempts=2, successes=2, improvements=2, cost_usd=pytest.approx(0.05))
    assert {k.id: k.stone_reason for k in kernel_rows}[a] == "new best of island 0"
    table = {r["model"]: r for r in by_model(rows, ["good", "sloppy", "idle"])}
    assert table["sloppy"]["calls"] == 3 and table["idle"]["calls"] == 0 and table["idle"]["improvements_per_usd"] is None
    assert table["good"]["improvements_per_usd"] == pytest.approx(2 / 0.05)


def test_a_resume_takes_the_runs_own_models_and_pins(tmp_path):
    """What optimize --resume calls when no --model is given: the names the run stored (aliases as
    given, so their kernelevo.toml tables apply again); what is given on the command line wins."""
    from pathlib import Path

    from kernelevo.evolution.loop.run import _model_names
    from kernelevo.evolution.options import OptimizeOptions

    with Archive.open(tmp_path / "a.sqlite") as archive:
        task = archive.add_task("t", "src", "h")
        new = archive.start_run(task, {"models": ["good", "local:m@http://127.0.0.1:9/v1"],
                                       "model_for": {"reflect": "smart"}}, 0, "cpu", "", "", "")
        old = archive.start_run(task, {"model": "openai:gpt-x"}, 0, "cpu", "", "", "")  # before ensembles

    def names(resume, models=(), pins=None):
        return _model_names(OptimizeOptions(Path("t.py"), models, ("cpu",), tmp_path / "a.sqlite", tmp_path, tmp_path,
                                            resume=resume, model_for=pins))

    assert names(new) == (["good", "local:m@http://127.0.0.1:9/v1"], {"reflect": "smart"})
    assert names(new, ("other",), ()) == (["other"], {})
    assert names(new, ("other",)) == (["other"], {"reflect": "smart"})
    assert names(old) == (["openai:gpt-x"], {})
    with pytest.raises(ValueError, match="no model to call"):
        names(None)


def test_the_shift_through_the_archive(tmp_path):
    """The same simulated run through the parts a search uses: each call and its kernel are stored,
    the ensemble rereads model_yield after each, and chooses the next mutate call's model."""
    members = {"good": FakeLLM(), "sloppy": FakeLLM()}
    members["sloppy"].info = lookup(parse_model("openai:s"), dict(input=0.5, output=2.0))  # half the price
    e = ensembles.Ensemble(members)
    rng, outcomes = random.Random(3), random.Random(4)
    rate = {"good": 1 / 3, "sloppy": 1 / 30}
    chosen = []
    with Archive.open(tmp_path / "a.sqlite") as archive:
        task = archive.add_task("t", "src", "h")
        run = archive.start_run(task, {}, 0, "cpu", "", "", "")
        for i in range(60):
            e.update(archive.model_yield(run))
            m = e.choose("mutate", rng)
            chosen.append(m)
            call = archive.add_llm_call(run, LLMCall(provider="openai", model=m, operator="mutate", outcome="ok",
                                                     cost_usd=e.prices[m], label=m))
            kid = archive.add_kernel(task, f"k{i}", "c", "mutate", run_id=run, llm_call_id=call)
            archive.add_evaluation(kid, Evaluation("ok", "", ""), run_id=run)
            if outcomes.random() < rate[m]:
                archive.mark_stepping_stone(kid, "new best of island 0")
        first = model_weights({}, {}, e.prices)
        e.update(archive.model_yield(run))
    last = model_weights({m: e.per_operator[("mutate", m)] for m in members}, e.overall, e.prices)
    assert e.prices["sloppy"] == pytest.approx(e.prices["good"] / 2)
    # the price prior, then what each model earned (these hold for 39 of 40 seeds tried; single
    # runs are noisy, the 100-run statistic above is the sharper claim)
    assert first["sloppy"] > 0.6 and last["good"] > 0.5
    assert chosen[-30:].count("good") > 15 and chosen.count("sloppy") >= 3  # no model starves


def test_a_resumed_bench_takes_its_own_models():
    from pathlib import Path

    from kernelevo.archive.records import BenchRecord
    from kernelevo.evolution.drivers.bench import BenchOptions, _as_stored
    from kernelevo.evolution.options import OptimizeOptions

    search = OptimizeOptions(Path("s"), (), ("cpu",), Path("a"), Path("o"), Path("c"))
    bench = BenchRecord("b1", "s", "search", {"models": ["fast", "smart"], "model_for": {"reflect": "smart"}}, "cpu",
                        "2.13", "stopped", 0.0, None)
    resumed = _as_stored(bench, BenchOptions(Path("s"), search, resume="b1")).search
    assert resumed.models == ("fast", "smart") and resumed.model_for == (("reflect", "smart"),)
    given = dataclasses.replace(search, models=("other",), model_for=())
    assert _as_stored(bench, BenchOptions(Path("s"), given, resume="b1")).search == given
