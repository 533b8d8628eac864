"""Carry a long job's outputs from one working session to the next.

The machines these benchmarks run on are new each session: a run directory outside the
repository (hours of a teacher's sampling, a report slice half answered) is gone the next
time. Every stage of marag resumes from its files, so committing those files is enough:

    python benchmarks/stash.py save /work/runs/student1 --name student1
    git add benchmarks/stash/student1.tar.gz && git commit -m "..."
    ...  # next session, on a new machine
    python benchmarks/stash.py restore student1 /work/runs/student1
    marag train run plan.toml --dir /work/runs/student1   # goes on where it stopped

What is kept: the text files a stage resumes from or reports (JSON, JSONL, TOML,
Markdown, TSV, logs), LoRA adapters in llama.cpp's form (`adapter.gguf`: half an hour of
fine-tuning, tens of MB), and the last checkpoint of each fine-tuning whole (its adapter
weights and optimizer state: an interrupted fine-tuning goes on from it). Left out: the
indexes and caches a run rebuilds from its data (`.marag/`, numpy arrays), the earlier
checkpoints, and any file over --max-mb. Restoring refuses to overwrite a file that
differs, and never writes outside the target directory.
"""

from __future__ import annotations

import argparse
import gzip
import io
import re
import sys
import tarfile
from pathlib import Path

STASH = Path(__file__).resolve().parent / "stash"
KEPT = {".json", ".jsonl", ".toml", ".md", ".tsv", ".log", ".txt", ".csv", ".gguf"}
SKIPPED_DIRS = {".marag", "__pycache__"}
CHECKPOINT_FILES = {".safetensors", ".pt"}  # a trainer checkpoint's weights and optimizer state


def _last_checkpoints(root: Path) -> set[Path]:
    """The newest `checkpoint-N` of each fine-tuning folder: the one `finetune` resumes
    from, by its own rule (`marag.train.finetune._checkpoints`, torn saves left out)."""
    from marag.train.finetune import _checkpoints

    folders = {p.parent for p in root.rglob("checkpoint-*")}
    return {found[-1] for folder in folders if (found := _checkpoints(folder))}


def _kept(path: Path, root: Path, last: set[Path]) -> bool:
    rel = path.relative_to(root)
    if SKIPPED_DIRS & set(rel.parts):  # indexes and caches: rebuilt from the data
        return False
    ckpt = next((parent for parent in path.parents if parent.name.startswith("checkpoint-")), None)
    if ckpt is not None:  # only the newest checkpoint, whole: one without its weights would fail to resume
        return ckpt in last and path.suffix in KEPT | CHECKPOINT_FILES
    return path.suffix in KEPT


def kept_files(root: Path, max_mb: float) -> list[Path]:
    out = []
    last = _last_checkpoints(root)
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or not _kept(path, root, last):
            continue
        rel = path.relative_to(root)
        if path.stat().st_size > max_mb * 1e6:
            print(f"left out (over {max_mb} MB): {rel}", file=sys.stderr)
            continue
        out.append(path)
    return out


def _checked_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise SystemExit(f"stash name {name!r}: letters, digits, '.', '_' and '-' only")
    return name


def save(root: Path, name: str, max_mb: float) -> Path:
    name = _checked_name(name)
    files = kept_files(root, max_mb)
    if not files:
        raise SystemExit(f"nothing to stash in {root}: no {', '.join(sorted(KEPT))} files")
    STASH.mkdir(exist_ok=True)
    out = STASH / f"{name}.tar.gz"
    tmp = out.with_suffix(".tmp")
    # no owners, modes or times, in the tar or the gzip header: the archive's bytes change
    # only when the files do, so a save of an unchanged run adds nothing to the history
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(str(path.relative_to(root)))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    size = sum(p.stat().st_size for p in files)
    print(f"{out}: {len(files)} files, {size / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.1f} MB")
    return out


def restore(name: str, root: Path) -> None:
    src = STASH / f"{_checked_name(name)}.tar.gz"
    if not src.is_file():
        known = ", ".join(sorted(p.name.removesuffix(".tar.gz") for p in STASH.glob("*.tar.gz"))) or "none"
        raise SystemExit(f"no stash named {name!r} (stashed: {known})")
    # every member checked before any is written: a refused stash leaves nothing half restored
    todo: list[tuple[Path, bytes]] = []
    with tarfile.open(src, "r:gz") as tar:
        for member in tar.getmembers():
            target = (root / member.name).resolve()
            if not member.isfile() or not target.is_relative_to(root.resolve()):
                raise SystemExit(f"{src}: {member.name!r} is not a plain file inside the target: refused")
            data = tar.extractfile(member).read()
            if target.exists():
                if target.read_bytes() != data:
                    raise SystemExit(f"{target} exists and differs from the stash: move it away first")
                continue
            todo.append((target, data))
    for target, data in todo:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    print(f"{root}: {len(todo)} files restored from {src.name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="pack a run directory's text files into benchmarks/stash/NAME.tar.gz")
    s.add_argument("root", type=Path)
    s.add_argument("--name", required=True)
    s.add_argument("--max-mb", type=float, default=60.0)
    r = sub.add_parser("restore", help="unpack benchmarks/stash/NAME.tar.gz into a directory")
    r.add_argument("name")
    r.add_argument("root", type=Path)
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.root, args.name, args.max_mb)
    else:
        restore(args.name, args.root)


if __name__ == "__main__":
    main()
