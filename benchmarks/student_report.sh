#!/usr/bin/env bash
# Issue 82's report: questions 41-80 of the three fresh dev sets (120 pooled, paired,
# hybrid, defaults), UniRAG run by the base 0.5B, the 0.5B with the student adapter of
# `marag train run plans/unirag-student.toml`, and the 1.5B teacher; then the 1.5B with
# the reader adapter against the base 1.5B for vanilla_rag_k5 and UniRAG.
#
#   RUNS=/work/runs bash benchmarks/student_report.sh [students|readers|tables]
#
# A report slice is run once (../shared/data/README.md): every run has a fixed id, so the
# script started again resumes the runs it had begun and skips the finished ones; carry
# them across sessions with benchmarks/stash.py. One heavy job at a time on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs}
MARAG=${MARAG:-.venv/bin/marag}
STUDENT=${STUDENT:-$RUNS/student1/adapters/qwen2.5-0.5b/adapter.gguf}
READER=${READER:-$RUNS/reader/lora/adapter.gguf}
SETS="hotpotqa_dev488 2wiki_dev500 musique_dev100"
SLICE=(--skip 40 --limit 40 --retriever hybrid --runs "$RUNS" -q)

need() { [ -f "$1" ] || { echo "missing $1: $2" >&2; exit 2; }; }

students() {
  need "$STUDENT" "run marag train run plans/unirag-student.toml --dir $RUNS/student1 first"
  for ds in $SETS; do
    "$MARAG" eval "$ds" "${SLICE[@]}" --strategies unirag --llm qwen2.5-0.5b --run-id "r82-base05-$ds"
    "$MARAG" eval "$ds" "${SLICE[@]}" --strategies unirag --llm qwen2.5-0.5b --lora "$STUDENT" --run-id "r82-tuned05-$ds"
    "$MARAG" eval "$ds" "${SLICE[@]}" --strategies unirag,vanilla_rag_k5 --run-id "r82-teacher-$ds"
  done
}

readers() {
  need "$READER" "train it: marag train reader RUNS... --dir $RUNS/reader && marag train finetune --dir $RUNS/reader --model qwen2.5-1.5b"
  for ds in $SETS; do
    "$MARAG" eval "$ds" "${SLICE[@]}" --strategies unirag,vanilla_rag_k5 --lora "$READER" --run-id "r82-reader-$ds"
  done
}

tables() {
  local args=()
  for ds in $SETS; do
    args+=("base05=$RUNS/r82-base05-$ds" "tuned05=$RUNS/r82-tuned05-$ds" "teacher=$RUNS/r82-teacher-$ds")
    [ -d "$RUNS/r82-reader-$ds" ] && args+=("reader=$RUNS/r82-reader-$ds")
  done
  .venv/bin/python benchmarks/pooled.py "${args[@]}" --baselines base05:unirag,teacher:unirag,teacher:vanilla_rag_k5
}

case "${1:-all}" in
  students) students ;;
  readers) readers ;;
  tables) tables ;;
  all)
    students
    if [ -f "$READER" ]; then readers; else echo "no reader adapter at $READER: its runs are left out" >&2; fi
    tables ;;
  *) echo "usage: $0 [students|readers|tables]" >&2; exit 2 ;;
esac
