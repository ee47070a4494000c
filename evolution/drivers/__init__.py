"""The drivers above the search loop: each calls the loop (or the judge) over many tasks and never
the other way. bench.py runs a suite (searched, or the given candidates judged) into one archive;
rejudge.py judges imported kernels again; whole.py optimizes a whole model in parts, whose
splitting, recording and assembling is parts/. Nothing else in evolution imports this package."""
