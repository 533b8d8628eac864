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
Markdown, TSV, logs) and LoRA adapters in llama.cpp's form (`adapter.gguf`: half an hour
of fine-tuning, tens of MB). Left out: the indexes and caches a run rebuilds from its
data (`.marag/`, numpy arrays), the trainer's own checkpoints, and any file over
--max-mb. Restoring refuses to overwrite a file that differs, and never writes outside
the target directory.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

STASH = Path(__file__).resolve().parent / "stash"
KEPT = {".json", ".jsonl", ".toml", ".md", ".tsv", ".log", ".txt", ".csv", ".gguf"}
SKIPPED_DIRS = {".marag", "__pycache__"}


def kept_files(root: Path, max_mb: float) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        # a checkpoint restored without its weights would be resumed from and fail
        skipped = SKIPPED_DIRS & set(rel.parts) or any(part.startswith("checkpoint-") for part in rel.parts)
        if not path.is_file() or path.suffix not in KEPT or skipped:
            continue
        if path.stat().st_size > max_mb * 1e6:
            print(f"left out (over {max_mb} MB): {rel}", file=sys.stderr)
            continue
        out.append(path)
    return out


def save(root: Path, name: str, max_mb: float) -> Path:
    files = kept_files(root, max_mb)
    if not files:
        raise SystemExit(f"nothing to stash in {root}: no {', '.join(sorted(KEPT))} files")
    STASH.mkdir(exist_ok=True)
    out = STASH / f"{name}.tar.gz"
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for path in files:
            data = path.read_bytes()
            # no owners, modes or times: the archive changes only when the files do
            info = tarfile.TarInfo(str(path.relative_to(root)))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    size = sum(p.stat().st_size for p in files)
    print(f"{out}: {len(files)} files, {size / 1e6:.1f} MB -> {out.stat().st_size / 1e6:.1f} MB")
    return out


def restore(name: str, root: Path) -> None:
    src = STASH / f"{name}.tar.gz"
    if not src.is_file():
        known = ", ".join(sorted(p.name.removesuffix(".tar.gz") for p in STASH.glob("*.tar.gz"))) or "none"
        raise SystemExit(f"no stash named {name!r} (stashed: {known})")
    root.mkdir(parents=True, exist_ok=True)
    written = 0
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
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written += 1
    print(f"{root}: {written} files restored from {src.name}")


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
