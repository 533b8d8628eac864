"""The scale-out index: BM25 full-text search, dense vectors and their fusion in Milvus,
reached through an index URI (`marag.index.uri`):

    milvus:kb.db#hotpot               a Milvus Lite file (one process at a time)
    milvus://127.0.0.1:19530/hotpot   a `milvus-lite server`, a Milvus server or cluster
    milvus://host:19530/hotpot?token_env=MY_VAR&tls=true

Credentials come only from an environment variable ($MARAG_MILVUS_TOKEN, "user:password"
or an API key; `token_env=` names another), never from the URI, so the URI can go into a
run's config.json, logs and argv. They are sent in plain gRPC only to a loopback host or
when the URI says `tls=false` (a trusted network); elsewhere the URI must say `tls=true`.

An opened index holds a connection (for a Lite file, the file's lock): close it
(`MilvusIndex.close()`, or `with open_milvus(...) as idx:`) when done with it.

The modules, one job each:

    target.py   where: an index URI parsed into a MilvusTarget; hints that name it
    client.py   connecting: credentials, TLS, a Lite file's lock, errors in one line
    layout.py   what is stored: the two collections, the manifest, the BM25 terms
    build.py    the resumable build (build_milvus)
    index.py    opening (open_milvus), MilvusIndex and MilvusRetriever

Everything is made as for an index directory (`IndexConfig`), so the two rank alike:
the same chunker; the same terms for BM25 (marag's analyzer on title + text: words,
lower-cased, Lucene's English stop words, Snowball stems; Milvus's own analyzers differ
between Milvus Lite and a server, and Lite has no stemmer), which Milvus turns into
BM25 sparse vectors and scores with the index's k1 and b; the same embedder and windows
for dense search (a chunk longer than the embedder reads is embedded as windows, and a
search asks Milvus for each chunk's best window, a grouped search: the local index's max
pooling); and the same hybrid, weighted reciprocal rank fusion of the two, ties by
position. benchmarks/RESULTS.md has the measured recall of both.

The manifest (config, corpus hash, embedder, counts) is stored with the collection;
opening refuses an unfinished build, another format and an embedder other than the one
the vectors were made with. A killed build resumes where it stopped when the same
command is run again.
"""

from marag.index.milvus.build import build_milvus
from marag.index.milvus.client import check_transport, connect, disconnect, explain, translated
from marag.index.milvus.index import KINDS, MilvusIndex, MilvusRetriever, check_embedder, open_milvus
from marag.index.milvus.layout import FORMAT_VERSION, MILVUS_ANALYZER, bm25_terms
from marag.index.milvus.target import DEFAULT_PORT, ENV_TOKEN, MilvusTarget, parse_target, serve_hint

__all__ = [
    "DEFAULT_PORT",
    "ENV_TOKEN",
    "FORMAT_VERSION",
    "KINDS",
    "MILVUS_ANALYZER",
    "MilvusIndex",
    "MilvusRetriever",
    "MilvusTarget",
    "bm25_terms",
    "build_milvus",
    "check_embedder",
    "check_transport",
    "connect",
    "disconnect",
    "explain",
    "open_milvus",
    "parse_target",
    "serve_hint",
    "translated",
]
