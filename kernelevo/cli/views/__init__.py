"""What kernelevo prints in a terminal (rich), the face's views: tables.py renders evaluations,
profiles, rows and models; progress.py is the live panel and summary of `optimize`; bench.py the
live lines and tables of `bench`; parts.py a split and an assembled model. A speedup, a time and a
share are written by kernelevo/text.py, shared with the library. The HTML reports of runs and
benches are the archive's (archive/reports/)."""
