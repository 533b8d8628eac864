"""Synthetic evaluation and training questions from your own index (`marag synth`)."""

from marag.synth.categories import DEFAULT_SPEC, CategorySpec, load_spec
from marag.synth.generate import DocumentPool, generate

__all__ = ["DEFAULT_SPEC", "CategorySpec", "DocumentPool", "generate", "load_spec"]
