"""marag: multi-agent retrieval-augmented generation toolkit."""

__version__ = "0.1.0"

# Bump when the on-disk index layout changes; loading an index written with another
# major format version fails with a message that says to rebuild it.
INDEX_FORMAT_VERSION = 1
