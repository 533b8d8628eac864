"""Plain records of a run, written by the ports, read by everything above."""

from marag.trace.records import (
    LLMCall,
    SearchCall,
    Step,
    Trace,
    activate,
    busy_seconds,
    current_role,
    current_step,
    current_trace,
    normalize_query,
    read_jsonl,
    record_llm_call,
    record_read,
    record_search,
    step,
    write_jsonl,
)

__all__ = [
    "LLMCall",
    "SearchCall",
    "Step",
    "Trace",
    "activate",
    "busy_seconds",
    "current_role",
    "current_step",
    "current_trace",
    "normalize_query",
    "read_jsonl",
    "record_llm_call",
    "record_read",
    "record_search",
    "step",
    "write_jsonl",
]
