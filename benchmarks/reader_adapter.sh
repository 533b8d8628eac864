#!/usr/bin/env bash
# Issue 82's reader adapter for the 1.5B: the final reads of training questions with the
# gold answer as the reply (RA-DIT's reader fine-tuning), from
#   - vanilla_rag_k5 runs on the tuning sets (HotpotQA and MuSiQue train 1-100, NQ 1-300),
#   - the UniRAG teacher's trajectories of `marag train run plans/unirag-student.toml`;
# then one LoRA of the 1.5B over them, applied to every strategy's final read.
#
#   RUNS=/work/runs bash benchmarks/reader_adapter.sh [reads|check|train]
#
# `check` is the tuning check before the report: an adapter trained without MuSiQue's
# reads (the teacher's MuSiQue trajectories too), against the base reader on MuSiQue train
# 1-100 with vanilla_rag_k5 (retrieval is deterministic: the same passages). No report
# set is touched here. Every run has a fixed id: started again, the script resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs}
MARAG=${MARAG:-.venv/bin/marag}
TEACHER=${TEACHER:-$RUNS/student1}
STEPS=${STEPS:-60}
BATCH=${BATCH:-2}
Q=(-q --runs "$RUNS" --strategies vanilla_rag_k5 --retriever hybrid)

reads() {
  "$MARAG" eval hotpotqa_train100 "${Q[@]}" --limit 100 --run-id rd-k5-hotpotqa
  "$MARAG" eval musique_train100 "${Q[@]}" --limit 100 --run-id rd-k5-musique
  "$MARAG" eval nq_open_oracle "${Q[@]}" --limit 300 --run-id rd-k5-nq
}

check() {
  reads
  "$MARAG" train reader "$RUNS/rd-k5-hotpotqa" "$RUNS/rd-k5-nq" "$TEACHER/sources/hotpotqa_train100-1-40" --dir "$RUNS/reader-check"
  "$MARAG" train finetune --dir "$RUNS/reader-check" --model qwen2.5-1.5b --batch "$BATCH" --steps "$STEPS"
  "$MARAG" eval musique_train100 "${Q[@]}" --limit 100 --lora "$RUNS/reader-check/lora/adapter.gguf" --run-id rd-check-musique
  .venv/bin/python benchmarks/pooled.py "base=$RUNS/rd-k5-musique" "reader=$RUNS/rd-check-musique" --baselines base:vanilla_rag_k5
}

train() {
  reads
  "$MARAG" train reader "$RUNS/rd-k5-hotpotqa" "$RUNS/rd-k5-musique" "$RUNS/rd-k5-nq" "$TEACHER" --dir "$RUNS/reader"
  "$MARAG" train finetune --dir "$RUNS/reader" --model qwen2.5-1.5b --batch "$BATCH" --steps "$STEPS"
}

case "${1:-train}" in
  reads) reads ;;
  check) check ;;
  train) train ;;
  *) echo "usage: $0 [reads|check|train]" >&2; exit 2 ;;
esac
