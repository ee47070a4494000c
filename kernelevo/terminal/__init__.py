"""What kernelevo prints in a terminal (rich): tables.py renders evaluations, profiles, rows and
models, and `speedup_text`, the one way a speedup and its interval are written; progress.py is the
live panel and summary of `optimize`; bench.py the live lines and tables of `bench`. The HTML
reports of runs and benches are the archive's (archive/reports/)."""
