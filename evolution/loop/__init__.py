"""The search loop: the one place where the agent, the judge and the archive meet.

Steady state rather than lock-step generations: up to `llm_concurrency` operator calls are in
flight while the judge works on the children that came back, so neither the GPUs nor the models
wait for a generation boundary. A generation is `children_per_generation` judged children; it is
what migration, the plateau rule and the display count.

Everything is written to the archive as it happens (LLM calls when their reply arrives, kernels
before they are judged, evaluations when they come back), so a resumed run rebuilds its state
from rows and a kill -9 loses no completed evaluation and no paid reply.

A kernel that would be the new best of the run is judged a second time, in a fresh process, before
it is admitted: prompts show the best as the kernel to beat, and one lucky measurement (a run
offered a 1.78x kernel for ten calls that was 0.66x timed alone) would steer the search for long.
Ties (overlapping intervals) never make a new best: see population.beats.

The loop is split by phase, each phase an object: planning.py (which child to start next, with what
prompt), children.py (what goes to the judge and what comes back: replies settled and recorded, children
judged, re-measured, admitted, profiled), shared.py (the one record of the run's objects both hold),
search.py (class Search: builds the two and runs the loop between them), run.py (a whole run: open
it, seed it, search, re-judge the best, write it out). This file re-exports the public names
(`optimize`, `Search`, ...); no piece imports it. A name is patched where it lives (the piece), not
here: the pieces do not read it from this package.
"""
from .planning import BARREN_TRANSLATIONS, PROFILE_WAIT_S
from .run import final_judgement, optimize, run_config
from .search import Search

__all__ = ["BARREN_TRANSLATIONS", "PROFILE_WAIT_S", "Search", "final_judgement", "optimize", "run_config"]
