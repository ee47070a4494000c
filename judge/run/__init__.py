"""Where and how judging runs: candidate code only ever runs here, in a worker process.

executor.py (a local pool of warm workers, one timing slot per device) and ray_executor.py (the
same jobs on a Ray cluster) take jobs; worker.py is the child process; jobs.py is what it does with
a job (check, build, test, time) and profiling.py its profile job; ncu_target.py is the process
Nsight Compute profiles; inline.py is the faster load_inline build; formats.py says which kind of
candidate a source is; sandbox.py confines a worker, and builds.py gives each candidate's builds a
folder of its own.
"""
