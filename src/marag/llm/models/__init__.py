"""marag's model catalogue and the store that pulls, checks and finds its files.

    from marag.llm.models import ModelStore, DEFAULT_MODEL
    path = ModelStore().ensure(DEFAULT_MODEL)      # pulled once, sha256-checked

`marag models list | pull NAME | path NAME | verify` is the same from the shell.
"""

from marag.llm.models.catalogue import DEFAULT_MODEL, MODELS, ModelEntry, register_model
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
)

__all__ = [
    "DEFAULT_MODEL",
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
    "marag_home",
    "register_model",
    "resolve_model_file",
]
