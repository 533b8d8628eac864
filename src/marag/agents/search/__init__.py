"""What agents use while they search for one question, on top of the index port:
what the question's searches have already done (`memory`), reciprocal rank fusion of
ranked id lists (`fusion`), grouping short texts into facets (`facets`), the next hop's
article by link (`linked`) and passages in hand ranked for a text (`subset`)."""
