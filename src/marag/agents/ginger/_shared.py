"""GINGER's shared system-prompt preamble (the layout is `marag.agents.layout`)."""

PREAMBLE = "You help write a grounded, well-organised answer from retrieved passages."
