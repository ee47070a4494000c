"""Prompt rendering against golden files, the stable-prefix rule, the model table and the config.

Golden files live in tests/golden/prompts/. After changing a template on purpose, regenerate with
KERNELEVO_UPDATE_GOLDEN=1 python -m pytest tests/test_agent_prompts.py and read the diff.
"""
import dataclasses
import json
import os
import re
import string
import tomllib
import warnings
from pathlib import Path

import pytest
from kernelevo.agent import models, prompting
from kernelevo.agent.edits import EditError, apply_edits, parse_edits
from kernelevo.agent.prompting import Context, Target, TaskView
from kernelevo.evaluation import Failure
from kernelevo.agent.providers import ModelRef, Usage
from kernelevo.agent.profile_block import profile_block
from kernelevo.config import ConfigError, load_config
from kernelevo.evaluation import Profile
from conftest import variant_of

GOLDEN = Path(__file__).parent / "golden" / "prompts"
PROMPTS = Path(__file__).parents[1] / "prompts"
TASK = TaskView("scale_relu", "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                "        return torch.relu(x * 2)\n", "float32[1024, 1024]", "[]")
GPU = Target("nvrtc", "NVIDIA H100 80GB HBM3", (9, 0), 132, 79.2, 50.0, 227)
CPU = Target("c", "Test CPU", cores=8, compiler="cc -O3 -march=native -fopenmp -std=c11 -lm (cc 12.2.0)")
KERNEL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
# A profile as the judge stored it for an honest kernel on an H100 (tests/fixtures/profile/)
PROFILE = Profile.from_dict(json.loads((Path(__file__).parent / "fixtures" / "profile" /
                                        "evaluation_row_softmax.json").read_text())["profile"])
A = variant_of(KERNEL, "nvrtc", "A", speedup_eager=1.52, speedup_compile=0.98, ms=0.0312,
            profile=profile_block(PROFILE), notes=prompting.approach({"launches": 1, "vector_io": True}, "nvrtc"),
            eager_ms=0.0474)
B = variant_of(KERNEL.replace("x\n", "x + 0\n"), "nvrtc", "B", speedup_eager=2.1, speedup_compile=1.3, ms=0.0229)
FAILED = Failure("incorrect", "value_mismatch", "output 0 differs from the reference", where="trial 2 (scaled x8), "
                 "output 0, index (3, 17)", rel_l2=0.41, max_abs=3.5, max_rel=1.0, tolerance="atol 1e-05, rtol 1e-05")
COMPILE = Failure("compile_error", "compile_error", "NVRTC refused the source",
                  excerpt='candidate.cu(7): error: identifier "expff" is undefined')


TRIED = (prompting.attempt_line(9, "mutate", "float4 loads", "correct, 1.31x (1.20-1.40) eager"),
         prompting.attempt_line(8, "mutate", "", prompting.phrase("attempt", "copy", kernel=3)))


def render_all() -> dict[str, list]:
    gpu, cpu = Context(TASK, GPU), Context(TASK, CPU, insights=(
        prompting.insight("A is fastest: fusing the scale into the load halves traffic.", [(7, 2.1), (3, 1.52)]),))
    edit = parse_edits("<<<<<<< SEARCH\n    def forward(self, y):\n=======\n    pass\n>>>>>>> REPLACE\n")
    try:
        apply_edits(KERNEL, edit)
    except EditError as exc:
        failure = exc
    return {
        "translate_gpu": prompting.translate(gpu),
        "translate_cpu": prompting.translate(Context(TASK, CPU)),
        "translate_seeded": prompting.translate(Context(TASK, GPU, inspirations=(B,))),
        "functional": prompting.functional(gpu),
        "repair_compile_diff": prompting.repair(gpu, A, COMPILE, "diff"),
        "repair_mismatch": prompting.repair(gpu, A, FAILED),
        "mutate_diff": prompting.mutate(gpu, A, "diff"),
        "mutate_attempts": prompting.mutate(gpu, dataclasses.replace(A, kernel_id=3, shown=dataclasses.replace(A.shown, attempts=TRIED))),
        "translate_second": prompting.translate(gpu, (prompting.attempt_line(1, "translate", "one fused pass", "being judged"),)),
        "crossover": prompting.crossover(cpu, [A, B]),
        "reflect": prompting.reflect(cpu, [A, B]),
        "edit_failed": [prompting.Message("user", prompting.edit_failed(failure.failures, failure.applied))],
    }


def as_text(messages) -> str:
    return "".join(f"=== {m.role}{' [cache]' if m.cache else ''} ===\n{m.content}\n" for m in messages)


@pytest.mark.parametrize("name", list(render_all()))
def test_rendering_matches_golden_file(name):
    text = as_text(render_all()[name])
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("KERNELEVO_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} changed; regenerate with KERNELEVO_UPDATE_GOLDEN=1 if meant"


def test_every_operator_shares_the_cached_prefix():
    rendered = {k: v for k, v in render_all().items() if k != "edit_failed"}
    for messages in rendered.values():
        assert [m.role for m in messages] == ["system", "user", "user"] and messages[1].cache
    gpu = [v[:2] for k, v in rendered.items() if k not in ("translate_cpu", "translate_seeded", "crossover", "reflect")]
    assert all(prefix == gpu[0] for prefix in gpu)  # same bytes: the provider's cache can hit


def test_prompts_teach_both_cuda_formats_and_ask_for_nvrtc():
    system = prompting.translate(Context(TASK, GPU))[0].content
    assert "Candidate format: nvrtc (write this one)" in system and "Candidate format: inline (only when" in system
    assert "// tune:" in system and "runtime.load_cuda" in system
    asked_inline = prompting.translate(Context(TASK, Target("inline", "gpu", (8, 0))))[0].content
    assert "Candidate format: inline (write this one)" in asked_inline


def test_a_triton_prompt_teaches_triton_alone_and_on_the_cpu_says_nothing_is_timed():
    task = TaskView("t", "class Model: pass", "float32[2]", "[]")
    on_gpu = prompting.prefix(Context(task, Target("triton", "NVIDIA H100", (9, 0), 132)))[0].content
    assert "# Candidate format: triton (write this one)" in on_gpu and "format: nvrtc" not in on_gpu
    on_cpu = prompting.prefix(Context(task, Target("triton", "AMD EPYC", cores=2, compiler="cc -O3")))[0].content
    assert "GPU performance engineer" in on_cpu and "Triton's interpreter" in on_cpu and "cc -O3" not in on_cpu
    assert "- Time: none on this machine" in on_cpu


def test_no_prompt_text_in_python():
    """Long string literals in agent/ would be prompt text that belongs in prompts/."""
    for path in (Path(__file__).parents[1] / "agent").glob("*.py"):
        for match in re.finditer(r'"([^"\n]{160,})"', path.read_text()):
            pytest.fail(f"{path.name}: a long literal looks like prompt text: {match.group(1)[:60]}...")


def test_templates_have_no_unfilled_placeholders():
    for messages in render_all().values():
        for m in messages:
            assert not re.search(r"\$\{?[a-z_]+\}?", m.content.replace("$$", "")), m.content[:80]


def test_every_template_is_used_or_listed():
    names = {p.name for p in PROMPTS.iterdir() if p.suffix in (".md", ".toml")}
    code = "".join(p.read_text() for p in (Path(__file__).parents[1] / "agent").glob("*.py"))
    unused = {n for n in names if n not in code and not n.startswith(("format_", "arch_"))}
    assert unused == set()


def test_missing_value_names_the_template():
    with pytest.raises(prompting.PromptError, match=r"prompts/feedback.md needs \$details"):
        prompting.fill("feedback.md", verdict="x", reason="y", message="z")


def test_model_table_is_complete_and_sourced():
    table = tomllib.loads((PROMPTS / "models.toml").read_text())
    for provider, entries in table.items():
        assert provider in ("openai", "anthropic", "local")
        for name, entry in entries.items():
            info = models.lookup(ModelRef(provider, name))
            assert info.input is not None and info.output is not None, name
            assert info.edit_format in ("whole", "diff")
            assert name == "*" or entry["source"].startswith("https://"), name


def test_dated_snapshots_find_their_entry_and_overrides_win():
    base = models.lookup(ModelRef("anthropic", "claude-haiku-4-5"))
    assert models.lookup(ModelRef("anthropic", "claude-haiku-4-5-20251001")).input == base.input
    assert models.lookup(ModelRef("anthropic", "claude-haiku-4-5-20991231")).input == base.input
    assert models.lookup(ModelRef("anthropic", "claude-haiku-4-5"), {"input": 9.0}).input == 9.0
    assert models.lookup(ModelRef("local", "qwen3-coder")).input == 0.0
    with pytest.raises(ValueError, match="unknown field"):
        models.lookup(ModelRef("local", "m"), {"inptu": 1.0})


def test_cost_arithmetic_and_unknown_parts():
    info = models.ModelInfo("anthropic", "m", input=3.0, cached_input=0.3, cache_write=3.75, output=15.0)
    usage = Usage(input=1_000_000, cache_read=2_000_000, cache_write=100_000, output=10_000, reasoning=5_000)
    assert models.cost(usage, info) == pytest.approx(3.0 + 0.6 + 0.375 + 0.15)
    no_cache_price = models.ModelInfo("openai", "m2", input=1.0, output=2.0)
    assert models.cost(Usage(input=10, output=10), no_cache_price) == pytest.approx(30 / 1e6)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert models.cost(Usage(input=10, cache_read=5, output=10), no_cache_price) is None
    assert "no cached_input price known" in str(seen[0].message)


def test_config_aliases_and_refused_keys(tmp_path, monkeypatch):
    path = tmp_path / "kernelevo.toml"
    path.write_text('[models.fast]\nmodel = "openai:gpt-6-luna"\nmax_tokens = 8000\nedit_format = "diff"\n'
                    'key_env = "TEAM_KEY"\n')
    config = load_config(path)
    fast = config.model("fast")
    assert (fast.spec, fast.max_tokens, fast.key_env, fast.overrides) == ("openai:gpt-6-luna", 8000, "TEAM_KEY",
                                                                         {"edit_format": "diff"})
    assert config.model("anthropic:claude-opus-5").spec == "anthropic:claude-opus-5"
    monkeypatch.chdir(tmp_path)
    assert load_config().path == "kernelevo.toml"
    path.write_text('[models.fast]\nmodel = "openai:x"\napi_key = "sk-123"\n')
    with pytest.raises(ConfigError, match="keys are read only from environment variables"):
        load_config(path)
    path.write_text('[models.fast]\nmodel = 3\n')
    with pytest.raises(ConfigError, match=r"\[models.fast\] needs model"):
        load_config(path)
    path.write_text("[models\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_template_syntax_is_valid():
    for path in PROMPTS.glob("*.md"):
        string.Template(path.read_text()).get_identifiers()  # raises on a stray $


def test_unmeasured_torch_compile_reads_as_such():
    from kernelevo.agent.prompting import variant

    text = variant(variant_of("x = 1\n", "c", "A", speedup_eager=1.5, ms=0.25))
    assert "1.50x the speed of PyTorch eager, torch.compile not measured, 0.2500 ms per call" in text
    text = variant(variant_of("x = 1\n", "c", "A", speedup_eager=1.5, speedup_compile=0.8, ms=0.25))
    assert "1.50x the speed of PyTorch eager, 0.80x torch.compile, 0.2500 ms per call" in text


def test_kernels_are_described_in_words_not_niche_codes():
    text = prompting.crossover(Context(TASK, GPU), [A, B])[-1].content
    assert "Approach: 1 kernel launch per forward; vector loads and stores." in text
    assert "L1" not in text
    assert prompting.approach({"launches": 5, "shared_memory": True}, "c") == \
        "Approach: 3 or more compiled-function calls per forward; tiles in shared memory."


def test_times_in_a_kernel_header_come_with_eager_from_the_same_measurement():
    text = prompting.variant(A)
    assert "0.0312 ms per call (PyTorch eager: 0.0474 ms per call in the same measurement)" in text
    assert "in the same measurement" not in prompting.variant(B)  # no eager time recorded: nothing claimed


def test_an_earlier_analysis_says_what_its_letters_named():
    text = prompting.insight("B beats A because it fuses the store.", [(4, 1.5), (9, 2.25)])
    assert text.startswith("Written after comparing A = kernel 4 (1.50x), B = kernel 9 (2.25x):\nB beats A")
    assert prompting.insight("no letters known", []) == "no letters known"


def test_the_role_and_the_compiler_match_the_target():
    cpu = prompting.translate(Context(TASK, CPU))[0].content
    assert cpu.startswith("You are an expert performance engineer for CPU code.") and "GPU" not in cpu.split("\n")[0]
    assert "built at import as: cc -O3 -march=native -fopenmp -std=c11 -lm (cc 12.2.0)." in cpu
    assert prompting.translate(Context(TASK, GPU))[0].content.startswith("You are an expert GPU performance engineer.")


def test_a_wrong_answer_names_its_tolerance_only_when_the_judge_gave_one():
    known = prompting.feedback(FAILED)
    assert "largest relative difference 1; tolerance: atol 1e-05, rtol 1e-05." in known
    unknown = prompting.feedback(dataclasses.replace(FAILED, tolerance=""))
    assert "largest relative difference 1." in unknown and "tolerance" not in unknown and "?" not in unknown
