"""The HTML report (archive/reports/run_html.py, report.css, report.js): one self-contained file, drawn by its own script.

The unit tests read the HTML as written; the Chromium test opens it in a headless browser with the
network cut off and reads the DOM after the script ran, so it proves the page draws offline.
"""
from __future__ import annotations

import copy
import difflib
import json
import os
import random
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from browser import load, required
from kernelevo.archive.reports.run_html import render

SECTIONS = ["summary", "progress", "lineage", "top", "verdicts", "operators", "models", "reflections"]
DANGER = 'X = "</script><b>bold</b><!-- <script>alert(1)</script>"'
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


# ---------- data ----------

def _source(kid: int, extra: str = "") -> str:
    return (f'"""kernel {kid}"""\nimport torch\n\nCUDA_SRC = r"""\n#include <cuda_runtime.h>\n'
            f'// kernel {kid}\n__global__ void k{kid}(const float* x, float* y) {{\n'
            f'    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    y[i] = x[i] * {kid}.0f;\n}}\n"""\n{extra}\n')


def _diff(old: int, new: int, sources: dict[int, str]) -> str:
    return "\n".join(difflib.unified_diff(sources[old].splitlines(), sources[new].splitlines(),
                                          f"kernel {old}", f"kernel {new}", lineterm=""))


def small_run() -> dict:
    """12 kernels: two roots, a crossover, a parent from another run, one failure of each kind."""
    k = [  # id, parents, operator, generation, verdict, reason, speedup, stepping stone
        (1, [], "translate", 0, "ok", "", 0.8, False),
        (2, [], "translate", 0, "compile_error", "nvcc: expected ';'", None, False),
        (3, [2], "repair", 0, "ok", "", 1.3, False),
        (4, [3], "mutate", 1, "incorrect", "max abs error 3.2", None, False),
        (5, [3], "mutate", 1, "ok", "", 1.9, True),
        (6, [1], "mutate", 1, "timeout", "over 60 s", None, False),
        (7, [5, 1], "crossover", 2, "ok", "", 2.6, False),
        (8, [99], "mutate", 2, "crashed", "illegal memory access", None, False),
        (9, [7], "tune", 3, "ok", "", 3.1, False),
        (10, [7], "reflect", 3, "rejected", "calls torch.softmax", None, False),
        (11, [9], "mutate", 3, "not judged", "copy: the same code as kernel 9, comments and layout aside", None, False),
        (12, [9], "mutate", 3, "no kernel", "no code block in the reply", None, False),
    ]
    path = [2, 3, 5, 7, 9]
    lineage = [{"id": i, "parents": p, "operator": op, "generation": g, "island": i % 2, "verdict": v, "reason": r,
                "speedup": s, "model": "gpt-x" if i % 3 else "claude-y", "stepping_stone": st, "on_best_path": i in path}
               for i, p, op, g, v, r, s, st in k]
    sources = {i: _source(i, DANGER if i == 9 else f"# variant {i}") for i in range(1, 13)}
    judged = [n for n in lineage if n["verdict"] not in ("not judged", "no kernel")]
    progress, best = [], None
    for n, node in enumerate(judged, 1):
        s = node["speedup"]
        improved = s is not None and (best is None or s > best)
        best = s if improved else best
        progress.append({"n": n, "kernel": node["id"], "verdict": node["verdict"], "speedup": s, "best": best,
                         "improved": improved, "spent_usd": round(0.03 * n, 6)})
    ok = sorted((n for n in lineage if n["verdict"] == "ok"), key=lambda n: -n["speedup"])
    top = [{"id": n["id"], "operator": n["operator"], "format": "nvrtc", "parents": n["parents"], "speedup": n["speedup"],
            "speedup_compile": n["speedup"] * 0.7, "candidate_ms": 0.05 / n["speedup"], "source": sources[n["id"]],
            "parent": n["parents"][0] if n["parents"] else None,
            "parent_speedup": next((m["speedup"] for m in lineage if n["parents"] and m["id"] == n["parents"][0]), None),
            "diff": _diff(n["parents"][0], n["id"], sources) if n["parents"] else "",
            "profile": {"dominant_kernel": f"k{n['id']}", "launches": 1, "bound": "memory", "sol_pct": 81.5}
            if n["id"] == 9 else None, "thinking": "Use float4 loads." if n["id"] == 9 else ""} for n in ok]
    verdicts: dict[str, int] = {}
    for n in judged:
        verdicts[n["verdict"]] = verdicts.get(n["verdict"], 0) + 1
    group = {"kernels": 12, "judged": 10, "ok": 5, "new_bests": 5, "best_speedup": 3.1, "calls": 13, "failed_calls": 1,
             "cost_usd": 0.3, "tokens": 123456, "replies": 12, "replies_judged": 10, "yield": 10 / 12,
             "ok_rate": 0.5, "usd_per_ok": 0.06}
    return {
        "run": {"id": "r-test-1", "task": "row_softmax", "task_hash": "abc123def4567890", "status": "budget",
                "stop_reason": "max-llm-calls reached", "started": "2026-01-01 10:00", "finished": "2026-01-01 10:20",
                "gpu": "NVIDIA H100", "torch": "2.11.0", "model": "openai:gpt-x", "format": "nvrtc", "policy": "mixed",
                "calls": 13, "failed_calls": 1, "cost_usd": 0.3, "unknown_cost_calls": 2, "best_kernel": 9,
                "best_speedup": 3.1, "best_speedup_ci": [2.8, 3.4], "best_speedup_compile": 2.17,
                "best_speedup_compile_ci": [2.16, 2.18]},
        "progress": progress, "lineage": lineage, "best_path": path, "top": top, "verdicts": verdicts,
        "problems": {"no code block in the reply": 1},
        "operators": [{**group, "operator": "mutate"}, {**group, "operator": "crossover", "yield": None}],
        "models": [{**group, "model": "gpt-x"}, {**group, "model": "claude-y", "yield": None, "best_speedup": None}],
        "reflections": [{"kernel": 7, "analysis": "Memory bound: <fuse> the two passes.", "variants": [10]}],
        "generated_at": "2026-01-01 10:21",
    }


def empty_run() -> dict:
    """A run that wrote no kernel at all."""
    return {"run": {"id": "r-empty", "task": "t", "task_hash": "", "status": "failed", "stop_reason": "", "started": "",
                    "finished": "", "gpu": "", "torch": "", "model": "", "format": "", "policy": "", "calls": 0,
                    "failed_calls": 0, "cost_usd": 0.0, "unknown_cost_calls": 0, "best_kernel": None,
                    "best_speedup": None, "best_speedup_compile": None},
            "progress": [], "lineage": [], "best_path": [], "top": [], "verdicts": {}, "problems": {},
            "operators": [], "models": [], "reflections": [], "generated_at": "2026-01-01 10:00"}


def big_run(kernels: int = 60, generations: int = 6, seed: int = 5) -> dict:
    """A synthetic run for looking at the page: several operators, crossovers, a long best path."""
    rng = random.Random(seed)
    data = small_run()
    ops = ["mutate", "mutate", "mutate", "crossover", "tune", "reflect", "repair"]
    verdicts = ["ok", "ok", "ok", "incorrect", "compile_error", "timeout", "crashed", "rejected", "not judged"]
    nodes: list[dict] = []
    for i in range(1, kernels + 1):
        gen = min(generations - 1, (i - 1) * generations // kernels)
        earlier = [n for n in nodes if n["generation"] < gen] or nodes
        good = [n for n in earlier if n["speedup"] and n["generation"] == gen - 1] or [n for n in earlier if n["speedup"]]
        # half the time the best of the last generation is the parent, as an elitist search does: a long best path
        pick = max(good, key=lambda n: n["speedup"]) if good and rng.random() < 0.5 else rng.choice(earlier or [None])
        parents = [] if i <= 3 else [pick["id"]]
        op = "translate" if not parents else rng.choice(ops)
        if op == "crossover":
            parents.append(rng.choice(earlier)["id"])
        v = rng.choice(verdicts)
        base = pick["speedup"] if parents and pick["speedup"] else 1.0
        s = round(base * rng.lognormvariate(0.12, 0.2), 3) if v == "ok" else None
        nodes.append({"id": i, "parents": parents, "operator": op, "generation": gen, "island": i % 3, "verdict": v,
                      "reason": "" if v == "ok" else f"{v} reason", "speedup": s, "model": rng.choice(["gpt-x", "claude-y"]),
                      "stepping_stone": rng.random() < 0.1, "on_best_path": False})
    best = max((n for n in nodes if n["speedup"]), key=lambda n: n["speedup"])
    path, node = [], best
    while node:
        path.append(node["id"])
        node["on_best_path"] = True
        node = next((n for n in nodes if node["parents"] and n["id"] == node["parents"][0]), None)
    data["lineage"], data["best_path"] = nodes, path[::-1]
    judged = [n for n in nodes if n["verdict"] != "not judged"]
    progress, top = [], None
    for n, k in enumerate(judged, 1):
        improved = k["speedup"] is not None and (top is None or k["speedup"] > top)
        top = k["speedup"] if improved else top
        progress.append({"n": n, "kernel": k["id"], "verdict": k["verdict"], "speedup": k["speedup"], "best": top,
                         "improved": improved, "spent_usd": round(0.011 * n + 0.002 * (n % 3), 6)})
    data["progress"] = progress
    data["verdicts"] = {v: sum(k["verdict"] == v for k in judged) for v in set(verdicts) - {"not judged"}}
    data["run"].update(best_kernel=best["id"], best_speedup=best["speedup"], calls=len(nodes))
    ok = sorted((n for n in nodes if n["speedup"]), key=lambda n: -n["speedup"])
    for t, n in zip(data["top"], ok):  # the hand-made sources and diffs, on the synthetic tree's ids
        parent = next((m for m in nodes if n["parents"] and m["id"] == n["parents"][0]), None)
        t.update(id=n["id"], speedup=n["speedup"], operator=n["operator"], parents=n["parents"],
                 parent=parent and parent["id"], parent_speedup=parent and parent["speedup"])
    return data


# ---------- a DOM from html.parser ----------

class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None = None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find(self, tag: str | None = None, **attrs: str) -> list[Node]:
        """Descendants with this tag whose attributes hold these values (class: any one of its words)."""
        def match(n: Node) -> bool:
            for k, v in attrs.items():
                have = n.attrs.get(k.rstrip("_").replace("_", "-"))
                if have is None or (v not in have.split() if k.startswith("class") else have != v):
                    return False
            return tag is None or n.tag == tag
        return [n for n in self.iter() if n is not self and match(n)]

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


class Tree(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.root = self.at = Node("#document", {})
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag, attrs):
        self.at.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.at))

    def handle_endtag(self, tag):
        node = self.at
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.at = node.parent

    def handle_data(self, data):
        self.at.children.append(data)


def section(tree: Node, sid: str) -> Node:
    [found] = tree.find("section", id=sid)
    return found


# ---------- the HTML as written ----------

def test_speedup_text_gives_the_interval_where_it_is_wider_than_2_percent():
    from kernelevo.text import speedup_text

    assert speedup_text(1.78, (1.52, 2.05)) == "1.78x (1.52-2.05)"
    assert speedup_text(1.78, [1.77, 1.79]) == "1.78x"  # 1.1 % wide: the digits would add nothing
    assert speedup_text(1.78) == speedup_text(1.78, None) == speedup_text(1.78, [None, None]) == "1.78x"
    assert speedup_text(None, (1.0, 2.0)) == "-"


def test_the_terminal_prints_each_speedup_with_its_interval(monkeypatch):
    import io

    from kernelevo.cli.views.bench import print_table
    from kernelevo.evolution.outcome import Progress, RunSummary
    from kernelevo.cli.views.progress import lines, summary_rows
    from kernelevo.evaluation import Evaluation, TimingStats
    from kernelevo.cli.views.tables import print_evaluation
    from rich.console import Console

    stats = TimingStats(median_ms=1.0, p10_ms=0.9, p90_ms=1.2, min_ms=0.9, mean_ms=1.0, n=30, rel_ci=0.01)
    e = Evaluation("ok", "", "passed", candidate=stats, eager=stats, speedup_eager=1.78,
                   speedup_eager_ci=(1.52, 2.05), speedup_compile=0.9, speedup_compile_ci=(0.895, 0.905))
    out = io.StringIO()
    print_evaluation(e, Console(file=out, width=200))
    assert "1.78x (1.52-2.05) vs eager, 0.90x vs torch.compile" in out.getvalue()
    text = lines(Progress(best_eager=1.78, best_eager_ci=(1.52, 2.05), best_compile=0.9, remeasuring=1), {})
    assert "best 1.78x (1.52-2.05) vs eager, 0.90x vs torch.compile" in text[0]
    assert "(1 a new best, re-measured)" in text[-1]
    outcome = type("Outcome", (), {"run_id": "r", "reason": "done", "best": e, "best_kernel_id": 4, "written": "k.py",
                                   "summary": RunSummary(search_speedups=(2.5, 1.2),
                                                         search_intervals=((1.0, 4.0), None))})
    rows = dict(summary_rows(outcome))
    assert rows["best kernel"].startswith("4: 1.78x (1.52-2.05) vs eager") and rows["in the search"].startswith(
        "2.50x (1.00-4.00) vs eager, 1.20x vs")
    task = {"name": "t", "verdict": "ok", "reason": "", "correct": True, "degenerate": "", "specialized": False,
            "speedup_eager": 1.78, "speedup_eager_ci": [1.52, 2.05], "speedup_compile": 0.9, "speedup_compile_ci": None,
            "calls": 1, "cost_usd": 0.0, "wall_s": 1.0}
    suite = {"fast_p": {b: {"1.0": 1.0} for b in ("eager", "compile")},
             "fast_p_healthy": {b: {"1.0": 1.0} for b in ("eager", "compile")}, "correct": 1, "tasks": 1,
             "correct_rate": 1.0, "geomean": {"eager": 1.78, "compile": 0.9}, "degenerate": 0, "specialized": 0,
             "calls": 1, "cost_usd": 0.0, "unknown_cost_calls": 0, "wall_s": 1.0}
    out = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda *a, **k: Console(file=out, width=200))
    print_table({"bench": {"id": "b1", "status": "finished", "suite": "s"}, "tasks": [task], "suite": suite})
    assert "1.78x (1.52-2.05)" in out.getvalue() and "0.90x " in out.getvalue()


def test_every_section_is_there_and_nothing_points_outside():
    html = render(small_run())
    tree = Tree(html).root
    for sid in SECTIONS:
        assert section(tree, sid).find("div", class_="content"), sid
    [title] = tree.find("title")
    assert title.text() == "kernelevo report: r-test-1 (row_softmax)"
    for n in tree.iter():
        for name in ("src", "href", "action", "data", "poster"):
            value = n.attrs.get(name, "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), (n.tag, name, value)
        assert not (n.tag == "link" and "stylesheet" in n.attrs.get("rel", "")), n.attrs
        assert not (n.tag == "script" and "src" in n.attrs), n.attrs
    scripts = tree.find("script")
    [code] = [s for s in scripts if "type" not in s.attrs]
    assert len(scripts) == 2 and code.text().count("function") > 20  # the drawing code is inlined
    [style] = tree.find("style")
    assert ".tree" in style.text() and "@import" not in style.text() and "url(" not in style.text()
    assert "Content-Security-Policy" in {m.attrs.get("http-equiv") for m in tree.find("meta")}
    assert tree.find("noscript") and "kernelevo archive ls --json" in tree.find("noscript")[0].text()


def test_the_data_block_parses_back_and_a_hostile_source_stays_text():
    data = small_run()
    html = render(data)
    tree = Tree(html).root
    [block] = tree.find("script", id="report-data")
    assert block.attrs["type"] == "application/json"
    assert json.loads(block.text()) == data
    assert "</script><b>" not in html and "<!-- <script>" not in html
    assert html.count("</script>") == 2  # only the two script elements end where they should
    assert not tree.find("b")  # the source's <b> did not become markup
    assert "&lt;fuse&gt;" not in html  # escaping is left to JSON (<\/) and the DOM, not doubled up


def test_titles_and_facts_are_escaped():
    data = small_run()
    data["run"]["id"], data["run"]["task"] = "<img src=x>", "a&b"
    html = render(data)
    assert "<img src=x>" not in html.split('id="report-data"')[0]
    assert "kernelevo report: &lt;img src=x&gt; (a&amp;b)" in html


def test_non_finite_numbers_become_null():
    data = small_run()
    data["top"][0]["speedup"] = float("nan")
    [block] = Tree(render(data)).root.find("script", id="report-data")
    assert json.loads(block.text())["top"][0]["speedup"] is None


def test_an_empty_run_renders_without_reflections():
    tree = Tree(render(empty_run())).root
    ids = [s.attrs["id"] for s in tree.find("section")]
    assert ids == SECTIONS[:-1]  # reflections only when there are some


# ---------- the page in a browser ----------

def _browser_or_skip() -> None:
    if not required():
        pytest.skip("no chromium found (set KERNELEVO_REQUIRE_BROWSER=1 to make this a failure)")


def _body(tree: Node) -> Node:
    [body] = tree.find("body")
    return body


def test_the_page_draws_every_section_offline(tmp_path):
    _browser_or_skip()
    data = small_run()
    page, shot = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(render(data), encoding="utf-8")
    tree = Tree(load(page, screenshot=shot)).root
    body = _body(tree)
    assert body.attrs.get("data-errors") == "", body.attrs.get("data-errors")
    assert set(body.attrs["data-rendered"].split()) == set(SECTIONS)

    lineage = section(tree, "lineage")
    nodes = lineage.find("g", class_="node")
    assert sorted(int(n.attrs["data-kernel"]) for n in nodes) == [k["id"] for k in data["lineage"]]
    assert {int(n.attrs["data-kernel"]) for n in lineage.find("g", class_="best-path")} == set(data["best_path"])
    best = lineage.find("path", class_="best")
    assert sorted((int(e.attrs["data-from"]), int(e.attrs["data-to"])) for e in best) == list(zip(data["best_path"], data["best_path"][1:]))
    assert len(lineage.find("path", class_="second")) == 1  # the crossover's second parent
    assert len(lineage.find("path", class_="outside")) == 1  # kernel 8's parent is in another run
    assert "crossover" in lineage.find("g", data_kernel="7")[0].find("title")[0].text()

    charts = section(tree, "progress").find("svg", class_="chart")
    ok = sum(p["speedup"] is not None for p in data["progress"])
    assert len(charts) == 2
    for chart in charts:  # every judged candidate is a dot, or a cross when it failed
        assert len(chart.find("circle", class_="dot")) == ok
        assert len(chart.find("circle", class_="new")) == sum(p["improved"] for p in data["progress"])
        assert len(chart.find("path", class_="fail")) == len(data["progress"]) - ok
        assert chart.find("path", class_="best-line")[0].attrs["d"].count("V") == ok - 1  # 5 rising bests

    top = section(tree, "top")
    cards = top.find("article", class_="kernel")
    assert [c.attrs["id"] for c in cards] == [f"kernel-{t['id']}" for t in data["top"]]
    code = cards[0].find("pre", class_="code")[0]
    assert DANGER in code.text() and code.find("span", class_="tok-k")  # shown as text, highlighted
    assert not code.find("b")
    diff = cards[0].find("pre", class_="diff")[0]
    assert f"+{DANGER}" in [s.text() for s in diff.find("span", class_="d-add")]
    assert "-# variant 7" in [s.text() for s in diff.find("span", class_="d-del")]
    assert diff.find("span", class_="d-hunk")

    assert len(section(tree, "verdicts").find("rect", class_="bar")) == len(data["verdicts"])
    assert "no code block in the reply" in section(tree, "verdicts").text()
    for sid, rows in (("operators", data["operators"]), ("models", data["models"])):
        assert len(section(tree, sid).find("tbody")[0].find("tr")) == len(rows)
    assert "2 calls of unknown price" in section(tree, "summary").text()
    # a speedup's interval where it is wider than 2 % of it, as the terminal prints it; a narrow one is left out
    assert "3.10\u00d7 (2.80-3.40) vs eager, 2.17\u00d7 vs torch.compile" in section(tree, "summary").text()
    assert "<fuse>" in section(tree, "reflections").text()

    assert shot.stat().st_size > 20_000  # a page, not a blank window
    if os.environ.get("OUT"):
        shutil.copy(shot, Path(os.environ["OUT"]) / "report.png")


def test_a_300_kernel_tree_stays_readable(tmp_path):
    _browser_or_skip()
    data = big_run(300, 8, seed=3)
    page = tmp_path / "big.html"
    page.write_text(render(data), encoding="utf-8")
    tree = Tree(load(page)).root
    assert _body(tree).attrs.get("data-errors") == ""
    lineage = section(tree, "lineage")
    at = {}
    for n in lineage.find("g", class_="node"):
        x, y = map(float, n.attrs["transform"].removeprefix("translate(").rstrip(")").split(","))
        at[int(n.attrs["data-kernel"])] = (x, y)
    assert sorted(at) == [k["id"] for k in data["lineage"]]
    rows: dict[float, list[float]] = {}
    for x, y in at.values():
        rows.setdefault(y, []).append(x)
    for xs in rows.values():  # no two kernels of a row overlap (nodes are 22 px wide)
        xs.sort()
        assert all(b - a >= 30 for a, b in zip(xs, xs[1:]))
    assert len(rows) > 5 and max(len(xs) for xs in rows.values()) > 40  # a wide, deep tree: the test means something
    for k in data["lineage"]:  # every edge points down, to a later row
        assert all(at[p][1] < at[k["id"]][1] for p in k["parents"] if p in at)
    [svg] = lineage.find("svg", class_="tree")
    assert float(svg.attrs["width"]) >= 30 * max(len(xs) for xs in rows.values())  # the width grew to fit


def test_an_empty_run_says_so_in_words(tmp_path):
    _browser_or_skip()
    page = tmp_path / "empty.html"
    page.write_text(render(empty_run()), encoding="utf-8")
    tree = Tree(load(page)).root
    body = _body(tree)
    assert body.attrs.get("data-errors") == "", body.attrs.get("data-errors")
    assert body.attrs["data-rendered"] == "summary"
    for sid in SECTIONS[1:-1]:
        assert section(tree, sid).find("p", class_="empty"), sid


def test_a_broken_section_does_not_blank_the_others(tmp_path):
    _browser_or_skip()
    data = copy.deepcopy(small_run())
    data["lineage"] = "not a list"  # the lineage code will throw on it
    page = tmp_path / "broken.html"
    page.write_text(render(data), encoding="utf-8")
    body = _body(Tree(load(page)).root)
    assert "lineage" in body.attrs["data-errors"]
    rendered = body.attrs["data-rendered"].split()
    assert "lineage" not in rendered and {"summary", "progress", "top", "operators"} <= set(rendered)


def test_a_request_from_the_page_is_refused_and_reported(tmp_path):
    # what makes "data-errors is empty" mean "the page asked for nothing outside the file"
    _browser_or_skip()
    page = tmp_path / "leaky.html"
    page.write_text(render(small_run()).replace("</main>", '<img src="https://example.com/x.png"></main>'), encoding="utf-8")
    body = _body(Tree(load(page)).root)
    assert "blocked request: https://example.com/x.png" in body.attrs["data-errors"]


def test_clicking_a_kernel_shows_its_details(tmp_path):
    _browser_or_skip()
    # after the report's own DOMContentLoaded listener (registered first, in <head>) drew the tree
    click = ("<script>document.addEventListener('DOMContentLoaded', () => document.querySelector("
             "'g.node[data-kernel=\"7\"]').dispatchEvent(new MouseEvent('click')))</script>")
    page = tmp_path / "click.html"
    page.write_text(render(small_run()).replace("</body>", click + "</body>"), encoding="utf-8")
    [info] = section(Tree(load(page)).root, "lineage").find("div", class_="node-info")
    assert info.text() == ("kernel 7: crossover (generation 2, island 1)verdict: ok, 2.60\u00d7 vs eager"
                           "model: gpt-xparents: 5, 1on the path to the best kernelsource and diff below")
    assert len(info.find("br")) == 5 and info.find("a", href="#kernel-7")
