"""The language of a query: sentences, conditions, discourse, decomposition, follow-ups."""
