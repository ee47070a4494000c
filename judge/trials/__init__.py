"""Is the candidate right, everywhere the reference is, and honestly so? Runs inside the worker.

inputs.py draws fresh inputs and weights; reference.py builds the reference (float64 copy, probing
twin, rebuilt for derived shapes) and says whether it accepts a shape; shapes.py derives other valid
shapes by role, below and above the task's sizes, and indexes.py makes index inputs follow them; generality.py
redraws weights and value ranges; compare.py says whether an output is the reference's and why not;
correctness.py runs the trials with guards.py's dynamic anti-cheat checks watching; policy.py says
whose code did the work; probe.py learns facts of a task once, from the reference alone.
"""
