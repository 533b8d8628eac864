"""What a loader is, what it returns, and the registry they live in."""

from __future__ import annotations

from marag.errors import MaragWarning

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from marag.corpus.models import Document, Question
from marag.registry import Registry

OnError = Literal["skip", "fail"]


class CorpusWarning(MaragWarning):
    """Something in the input was repaired or dropped; loading went on."""


class LoadedCorpus(BaseModel):
    """Documents and (when the format has them) questions read from one path."""

    documents: list[Document] = Field(default_factory=list)
    questions: list[Question] = Field(default_factory=list)
    source: str = ""  # the path that was loaded
    format: str = ""  # the loader's registered name
    skipped: int = 0  # malformed records left out (on_error="skip")
    skipped_at: list[str] = Field(default_factory=list)  # where each was: "file line N: what was wrong"
    duplicates: int = 0  # repeated documents merged into their first occurrence


LoadFn = Callable[[Path, OnError], LoadedCorpus]
DetectFn = Callable[[Path], bool]


@dataclass(frozen=True)
class Loader:
    """A named input format.

    `detect` looks at names and at most the first record of each file (cheap), so
    auto-detection stays fast on big inputs. Lower `priority` is asked first: specific
    benchmark layouts must win over the generic `jsonl` and `folder` formats.
    """

    name: str
    load: LoadFn
    detect: DetectFn
    description: str = ""
    priority: int = 50
    has_documents: bool = True
    has_questions: bool = True


LOADERS: Registry[Loader] = Registry("loaders")


def register_loader(
    name: str,
    *,
    detect: DetectFn,
    description: str,
    priority: int = 50,
    has_documents: bool = True,
    has_questions: bool = True,
) -> Callable[[LoadFn], LoadFn]:
    """Decorator: register a `load(path, on_error)` function as format `name`."""

    def decorator(fn: LoadFn) -> LoadFn:
        LOADERS.register(name)(
            Loader(name, fn, detect, description, priority, has_documents, has_questions)
        )
        return fn

    return decorator
