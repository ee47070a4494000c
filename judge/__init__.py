"""The judge: build, isolate, check, time. Candidate code never runs in the caller's process.

The rest of kernelevo uses it through one door, api.py (`Judge`, `JudgeOptions`, and what a caller
sets up: `make_executor`, a worker's `WorkerLimits`, `TimingConfig`, the Ray cluster's queries), and
verdicts.py; nothing imports deeper (tests/test_house.py checks it). Inside, each
sub-package owns one step a candidate passes, in this order:
- static/: anti-cheat checks that read the source, a registry of small functions, before anything runs;
- run/: where and how a job runs: the executors (local pool, Ray), the worker process and its jobs
  (build, check, time, profile), the faster inline build (a candidate's format is read by kernelevo.formats);
- trials/: correctness on fresh inputs, derived shapes, redrawn weights and large values, the
  comparison and its tolerances, and the dynamic anti-cheat guards and kernel policy that watch it;
- measure/: the clock (interleaved timing to a stated precision), cross-checks of the timings, the
  CPU's timing hold, compiler resources, speed of light and Nsight Compute.
verdicts.py turns what went wrong into a verdict with a stable reason id; job.py is the record of what a
worker is asked to do, built by api and read by run/ and trials/; every package uses those two.
job_result.py is the record a job comes back as, once out of run/ (its worker's JSON until then);
results.py turns it into the caller's Evaluation, with the parent's second opinions.
Imports go downward only: api -> results/run -> measure -> trials -> static/verdicts/job.
"""
