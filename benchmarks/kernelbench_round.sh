#!/bin/bash
# One replay round of the KernelBench yardstick (issue 52), or of a whole model's search in parts (issue 51),
# on a GPU machine that cannot reach a model.
#
#   STATE=benchmarks/results/kernelbench-rounds SUITE=DIR OUT=DIR [GPUS=0,1] [TT=380] [AGAIN="TASK ..."] \
#     bash benchmarks/kernelbench_round.sh
#   STATE=DIR MODEL=FILE OUT=DIR [PARTS=1] [CALLS=4] [MODES=eager,default,reduce-overhead] [GRANULARITY=module] \
#     [TT=380] bash benchmarks/kernelbench_round.sh
#
# SUITE is the folder benchmarks/kernelbench_sample.py wrote (KernelBench stays out of the repository).
# With MODEL, the round is `kernelevo optimize MODEL --parts PARTS` (CALLS for all parts together): round 1
# splits the model into STATE/parts (keep it: the bench's tasks are its files, by relative path), each round
# serves every reply so far (--resume), and the round whose searches all end assembles the model (OUT gets its
# drop-in, its .json and its page).
# On a device machine without the network, first (wheels of openai, typer and rich carried in .whl/, downloaded
# here with `pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .whl ...`):
#   python3 -m pip install -q --no-index --find-links .whl --target /tmp/site openai typer rich
#   export PYTHONPATH=/tmp/site; python3 -m pip install -q --no-deps --no-build-isolation -e .; hash -r
# STATE holds what the rounds have so far, in the repository so that a lost machine loses nothing paid for:
#   prompts/<task>/NNNN.prompt.md and NNNN.reply.md (each reply written by a fresh model that saw only its prompt),
#   archive.sqlite.gz (the bench's archive: runs, kernels, verdicts, the call each waiting search waits at),
#   bench_id (absent before round 1).
# Each round serves every reply written so far (`bench --resume`), judges the new kernels and writes each
# task's next prompt. A round with a higher CALLS than the last reopens the tasks their cap stopped; a round
# with CALLS at a waiting task's calls made ends its search there (its final judgement, no new call). The bench gets INT at TT seconds (it stops each search cleanly; --resume goes on), and a
# USR1 45 s before that, which prints every thread's stack to bench.err (where a task hangs, it says where).
# OUT receives: archive.sqlite.gz, prompts.tgz (the prompts folder as the round left it), bench.json, bench.log,
# bench.err and cache.tgz (baselines and calibrations, no builds: carried as .scratch/cache.tgz, or CACHE, saves
# measuring them again). Merge into STATE: archive.sqlite.gz and bench_id over STATE's, prompts.tgz unpacked over STATE
# (it holds every prompt and reply so far), cache.tgz to .scratch/. Then answer the new prompts.
set -u
: "${STATE:?}" "${OUT:?}" "${SUITE:-${MODEL:?SUITE or MODEL}}"
GPUS=${GPUS:-all}; TT=${TT:-380}; CALLS=${CALLS:-6}
W=$(mktemp -d)
mkdir -p "$W/out" "$W/cache" "$OUT"
cp -r "$STATE/prompts" "$W/out/prompts" 2>/dev/null || mkdir -p "$W/out/prompts"
[ -f "$STATE/archive.sqlite.gz" ] && gunzip -c "$STATE/archive.sqlite.gz" > "$W/a.sqlite"
CACHE=${CACHE:-.scratch/cache.tgz}  # baselines and calibrations of earlier rounds
[ -f "$CACHE" ] && tar -xzf "$CACHE" -C "$W/cache"
RESUME=(); [ -f "$STATE/bench_id" ] && RESUME=(--resume "$(cat "$STATE/bench_id")")
# AGAIN="TASK ...": done tasks whose final judgement is made again by this judge (bench --again; no call)
for t in ${AGAIN:-}; do RESUME+=(--again "$t"); done
echo "round: $(find "$W/out/prompts" -name '*.reply.md' | wc -l) replies, ${RESUME[*]:-a new bench}"
(sleep $((TT - 45)); pkill -USR1 -f "python.*kernelevo (bench|optimize)" ) &
# in the foreground: a command started with & ignores INT, and the bench must see it
if [ -n "${MODEL:-}" ]; then
  RUN=(optimize "$MODEL" --parts "${PARTS:-1}" --parts-dir "$STATE/parts" --max-llm-calls "$CALLS"
       --granularity "${GRANULARITY:-module}" --modes "${MODES:-eager,default,reduce-overhead}")
else
  RUN=(bench "$SUITE" --max-llm-calls-per-task "$CALLS")
fi
COLUMNS=160 timeout -s INT -k 90 "$TT" kernelevo "${RUN[@]}" --format auto --baseline compile \
  --model "replay:$W/out/prompts" --out "$W/out" --archive "$W/a.sqlite" \
  --cache-dir "$W/cache" --gpus "$GPUS" "${RESUME[@]}" > "$OUT/bench.log" 2> "$OUT/bench.err"
echo "${RUN[0]} exit $?"
kernelevo bench ls --archive "$W/a.sqlite" --json > "$OUT/benches.json" 2>> "$OUT/bench.err"
ID=$(python3 -c "import json,sys; b=json.load(open(sys.argv[1])); print(b[-1]['id'] if b else '')" "$OUT/benches.json")
[ -n "$ID" ] && kernelevo bench show "$ID" --archive "$W/a.sqlite" --json > "$OUT/bench.json" 2>> "$OUT/bench.err"
echo "$ID" > "$OUT/bench_id"
# one file with everything: a bench stopped with a search still running leaves its last writes in the
# write-ahead log beside the archive (a.sqlite-wal), and a copy of a.sqlite alone lost a whole round's judgements
python3 -c "import sqlite3, sys; s = sqlite3.connect(sys.argv[1]); d = sqlite3.connect(sys.argv[2]); s.backup(d); d.close(); s.close()" \
  "$W/a.sqlite" "$W/copy.sqlite"
gzip -c "$W/copy.sqlite" > "$OUT/archive.sqlite.gz"
tar -czf "$OUT/prompts.tgz" -C "$W/out" prompts
[ -n "${MODEL:-}" ] && tar -czf "$OUT/parts.tgz" -C "$STATE" parts && cp "$W/out"/*_kernelevo.* "$OUT/" 2>/dev/null
tar -czf "$OUT/cache.tgz" -C "$W/cache" $(cd "$W/cache" && ls -d baselines calibration 2>/dev/null)
tail -25 "$OUT/bench.log"
