"""A folder of `.txt` / `.md` files (searched recursively), or a single such file.

- id: the path relative to the folder, with `/` separators (`finance/2023/q1.md`).
- title: the first Markdown heading of a `.md` file, else the file stem.
- metadata: `path` (the same relative path) and, for files inside a subfolder, `folder`:
  the name of the top-level subfolder they are in, which makes each subfolder a
  ready-made collection (see `marag.corpus.collections`). Files at the top level have
  no `folder`.

Files and folders whose names start with `.` are ignored; paths are sorted so loading
is deterministic.
"""

from __future__ import annotations

import re
from pathlib import Path

from marag.corpus.loaders._io import LoadContext
from marag.corpus.loaders.base import LoadedCorpus, OnError, register_loader
from marag.corpus.models import Document

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def _text_files(folder: Path) -> list[Path]:
    found = []
    for p in folder.rglob("*"):
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            found.append(p)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def markdown_title(text: str) -> str:
    """The first ATX heading (`# Title`) outside fenced code blocks, or ""."""
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            m = _HEADING.match(line)
            if m:
                return m.group(1).strip()
    return ""


def detect(path: Path) -> bool:
    if path.is_file():
        return path.suffix.lower() in TEXT_SUFFIXES
    if not path.is_dir():
        return False
    if _text_files(path):
        return True
    # A folder with no files at all is an empty folder corpus: claiming it lets the user
    # see "no documents found" rather than "unknown format".
    return not any(p.is_file() for p in path.rglob("*"))


@register_loader(
    "folder",
    detect=detect,
    description="a folder of .txt/.md files (recursive); subfolder name -> metadata 'folder'",
    has_questions=False,
    priority=100,
)
def load_folder(path: Path, on_error: OnError = "fail") -> LoadedCorpus:
    ctx = LoadContext(path, on_error)
    root, files = (path.parent, [path]) if path.is_file() else (path, _text_files(path))
    documents = []
    for file in files:
        text = ctx.read_text(file)
        rel = file.relative_to(root).as_posix()
        is_md = file.suffix.lower() in (".md", ".markdown")
        title = (markdown_title(text) if is_md else "") or file.stem
        metadata: dict[str, str] = {"path": rel}
        parts = rel.split("/")
        if len(parts) > 1:
            metadata["folder"] = parts[0]
        documents.append(Document(id=rel, title=title, text=text, metadata=metadata))
    return ctx.result(documents, [], "folder")
