"""What agents use while they search for one question, on top of the index port:
what the question's searches have already done (`memory`), reciprocal rank fusion of
ranked id lists (`fusion`), and grouping short texts into facets (`facets`)."""
