"""The corpora of the speed benchmarks (speed_bm25, speed_dense, speed_hnsw, speed_hybrid).

Corpora (`--corpora`): `pools` (the HotpotQA and NQ passage pools, 1.6k passages, MiniLM
vectors), `pools-dup` (the same, every passage three times), `tiled` (`--passages`
passages of real text: the HotpotQA, NQ, MuSiQue and DataMorgana pools tiled with
sentence-level perturbation so no two passages are identical), `tiled-dup` (as many
passages, a quarter of them unique, each present four times at scattered positions),
and `synthetic` (Zipf pseudo-words, the old default). Encoding 200k passages with MiniLM
takes over an hour on two cores, so the tiled corpora use `--embedder` (default
wordllama, else hashing). Queries are the HotpotQA and NQ questions.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from dataclasses import dataclass

import numpy as np
from _common import DATASETS, load_pool, renamed

from marag.corpus.models import Chunk
from marag.index.traced import index_text

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def passages_of(chunks: list[Chunk], words: int = 120) -> list[str]:
    """Real passages of at most ~`words` words: short chunks as they are, long ones
    (DataMorgana's web pages) cut at sentence ends."""
    out = []
    for c in chunks:
        current: list[str] = []
        for sentence in _SENTENCE_END.split(c.text.strip()):
            current.append(sentence)
            if sum(len(s.split()) for s in current) >= words:
                out.append(" ".join(current))
                current = []
        if current:
            out.append(" ".join(current))
    return [p for p in out if len(p.split()) >= 5]


def perturbed(base: list[str], n: int, seed: int) -> list[str]:
    """`n` distinct passages made from `base`: copies after the first have one of their
    sentences dropped, repeated or replaced by a sentence of another passage, and
    adjacent sentences swapped, so they are near-duplicates as on the web."""
    rng = np.random.default_rng(seed)
    split = [_SENTENCE_END.split(p) for p in base]
    out, seen = list(base[:n]), set(base[:n])
    while len(out) < n:
        i = int(rng.integers(len(base)))
        sentences = list(split[i])
        j = int(rng.integers(len(sentences)))
        op = int(rng.integers(3))
        other = split[int(rng.integers(len(base)))]
        if op == 0 and len(sentences) > 1:
            del sentences[j]
        elif op == 1:
            sentences.insert(j, sentences[j])
        else:
            sentences[j] = other[int(rng.integers(len(other)))]
        if len(sentences) > 1:
            a = int(rng.integers(len(sentences) - 1))
            sentences[a], sentences[a + 1] = sentences[a + 1], sentences[a]
        text = " ".join(sentences)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def tiled(args: argparse.Namespace, duplicates: int) -> list[Chunk]:
    """`args.passages` passages of real text, `duplicates` exact copies of each unique
    one, the copies at scattered positions."""
    base = []
    for name in DATASETS:
        base += passages_of(load_pool(name, args.data_dir)[0])
    texts = perturbed(base, args.passages // duplicates, args.seed)
    order = np.random.default_rng(args.seed + 1).permutation(len(texts) * duplicates)
    return [Chunk(id=f"t{i}#0", doc_id=f"t{i}", text=texts[j % len(texts)]) for i, j in enumerate(order)]


def synthetic(passages: int, seed: int, vocab_size: int = 50_000) -> list[Chunk]:
    """Zipf-distributed pronounceable pseudo-words, 30-80 per passage."""
    rng = np.random.default_rng(seed)
    cons, vows = list("bcdfghjklmnprstvwz"), list("aeiou")
    words: set[str] = set()
    while len(words) < vocab_size:
        syllables = int(rng.integers(1, 5))
        words.add("".join(rng.choice(cons) + rng.choice(vows) for _ in range(syllables)) + str(rng.choice(cons)))
    vocab = np.array(sorted(words))
    rng.shuffle(vocab)
    p = 1.0 / np.arange(1, vocab_size + 1) ** 1.07
    lengths = rng.integers(30, 81, size=passages)
    drawn = vocab[rng.choice(vocab_size, size=int(lengths.sum()), p=p / p.sum())]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [
        Chunk(id=f"p{i}#0", doc_id=f"p{i}", text=" ".join(drawn[bounds[i] : bounds[i + 1]]))
        for i in range(passages)
    ]


@dataclass
class Corpus:
    label: str
    chunks: list[Chunk]
    queries: list[str]
    embedder: str
    unique_texts: list[str]  # what gets embedded ...
    which: np.ndarray  # ... and chunk i's vector is the one of unique_texts[which[i]]


def pick_embedder(name: str) -> str:
    if name != "auto":
        return name
    return "wordllama" if importlib.util.find_spec("wordllama") else "hashing"


def corpora(args: argparse.Namespace) -> list[Corpus]:
    names = [n for n in args.corpora.split(",") if n]
    unknown = set(names) - {"pools", "pools-dup", "tiled", "tiled-dup", "synthetic"}
    if unknown:
        raise SystemExit(f"unknown corpora {sorted(unknown)}")
    if not names:
        return []
    pool, queries = [], []
    for name in ("hotpotqa", "nq"):
        c, q = load_pool(name, args.data_dir)
        pool += c
        queries += q
    texts = [index_text(c) for c in pool]
    out = []
    n = len(pool)
    if "pools" in names:
        out.append(Corpus("pools", pool, queries, "minilm", texts, np.arange(n)))
    if "pools-dup" in names:
        copies = [c for copy in range(3) for c in renamed(pool, str(copy))]
        out.append(Corpus("pools x3", copies, queries, "minilm", texts, np.tile(np.arange(n), 3)))
    emb = pick_embedder(args.embedder)
    for label, copies in (("tiled", 1), ("tiled-dup", 4)):
        if label in names:
            chunks = tiled(args, copies)
            unique = sorted({c.text for c in chunks})
            where = {t: i for i, t in enumerate(unique)}
            tag = "real text" if copies == 1 else f"real text, {len(unique):,} unique x{copies}"
            out.append(Corpus(f"{label} ({tag})", chunks, queries, emb, unique, np.array([where[c.text] for c in chunks])))
    if "synthetic" in names:
        chunks = synthetic(args.passages, args.seed)
        out.append(Corpus("synthetic", chunks, queries, emb, [c.text for c in chunks], np.arange(len(chunks))))
    return out
