"""Scripted relevance judges written per document also answer mRAG's page judge
(`judge_pages`, the default): the page prompt is split into one prompt per document, in
the per-document judge's layout ("Document: <title>"), and the replies are collected."""

from __future__ import annotations

import re

_BLOCK = re.compile(r"^\[(\d+)\] (.*)$", re.M)


def page_documents(user: str) -> list[str]:
    """The per-document prompts of a page judge prompt, in page order: what precedes the
    documents, then "Document: <title>" and its text."""
    head, _, body = user.rpartition("Documents:\n")  # what precedes the documents (question, aspects) stays
    marks = list(_BLOCK.finditer(body))
    docs = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        text = body[m.end() : end].strip().split("\n\n")[0]
        docs.append(f"{head}Document: {m.group(2)}\n{text}")
    return docs


def judge_page(per_document, user: str) -> dict:
    """A page judgement from a per-document judge (a function of the prompt, or a list of
    replies consumed in order)."""
    replies = [per_document(d) if callable(per_document) else per_document.pop(0) for d in page_documents(user)]
    return {"judgements": replies}
