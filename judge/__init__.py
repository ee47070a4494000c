"""The judge: build, isolate, check, time. Candidate code never runs in the caller's process."""
