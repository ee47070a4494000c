"""What a run or a bench reports, read from the archive: the data (run_data.py, bench_data.py: plain
dicts, JSON-ready, also printed with --json) and each as ONE self-contained HTML file (run_html.py
with report.js and report.css beside it, bench_html.py). Reads stored rows only; nothing is measured."""
