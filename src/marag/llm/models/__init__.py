"""marag's model catalogue and the store that pulls, checks and finds its files.

    from marag.llm.models import ModelStore, DEFAULT_MODEL
    path = ModelStore().ensure(DEFAULT_MODEL)      # pulled once, sha256-checked

`marag models list | pull NAME | path NAME | verify` is the same from the shell. Besides
the LLMs the catalogue holds the dense embedder's file (`EMBEDDER_MODEL`, minilm-int8),
pulled the same way and read by `marag.index.embed` from the same folder.
"""

from marag.llm.models.catalogue import DEFAULT_MODEL, EMBEDDER_MODEL, MODELS, ModelEntry, llm_names, register_model
from marag.llm.models.sources import Fetched, HubSource, SourceError, WheelSource
from marag.llm.models.store import (
    HOME_ENV,
    OFFLINE_ENV,
    ModelPullError,
    ModelStore,
    catalogue_entry_for,
    ctx_per_slot,
    marag_home,
    resolve_model_file,
    size_text,
)

__all__ = [
    "DEFAULT_MODEL",
    "EMBEDDER_MODEL",
    "HOME_ENV",
    "MODELS",
    "OFFLINE_ENV",
    "Fetched",
    "HubSource",
    "ModelEntry",
    "ModelPullError",
    "ModelStore",
    "SourceError",
    "WheelSource",
    "catalogue_entry_for",
    "ctx_per_slot",
    "llm_names",
    "marag_home",
    "register_model",
    "resolve_model_file",
    "size_text",
]
