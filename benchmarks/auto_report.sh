#!/usr/bin/env bash
# Issue 81's report: 160 questions of mixed difficulty (1-40 of hotpotqa_dev488,
# 2wiki_dev500 and musique_dev100, and nq_open_oracle 561-600), the 1.5B default,
# hybrid, defaults; vanilla_rag_k5, the agents and auto in one run per set, so auto's
# curve and the oracle router are drawn from the same questions without a model call.
#
#   RUNS=/work/runs bash benchmarks/auto_report.sh [runs|tables]
#
# A report slice is run once (../shared/data/README.md): every run has a fixed id, so the
# script started again resumes where it stopped (carry runs across sessions with
# benchmarks/stash.py). Hours on 2 cores: one heavy job at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs}
MARAG=${MARAG:-.venv/bin/marag}
STRATEGIES=${STRATEGIES:-vanilla_rag_k5,auto,unirag,mrag,kair}
CHART=${CHART:-docs/images/quality_cost_report.png}
SETS=("hotpotqa_dev488 0" "2wiki_dev500 0" "musique_dev100 0" "nq_open_oracle 560")

runs() {
  for set in "${SETS[@]}"; do
    read -r ds skip <<<"$set"
    "$MARAG" eval "$ds" --skip "$skip" --limit 40 --strategies "$STRATEGIES" --retriever hybrid \
      --runs "$RUNS" --run-id "r81-$ds" -q
  done
}

tables() {
  local dirs=()
  for set in "${SETS[@]}"; do
    read -r ds _ <<<"$set"
    dirs+=("$RUNS/r81-$ds")
  done
  .venv/bin/python benchmarks/pooled.py "${dirs[@]}" --baselines vanilla_rag_k5,unirag --chart "$CHART"
}

case "${1:-runs}" in
  runs) runs; tables ;;
  tables) tables ;;
  *) echo "usage: $0 [runs|tables]" >&2; exit 2 ;;
esac
