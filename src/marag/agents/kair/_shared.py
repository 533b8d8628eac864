"""The KAIR roles' shared system-prompt preamble (the layout is `marag.agents.layout`)."""

PREAMBLE = (
    "You are one agent of a retrieval team that gathers the evidence a question needs from a "
    "document collection, keeping track of what is known and what is still required. Reply with JSON only."
)
