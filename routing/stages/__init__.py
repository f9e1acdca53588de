"""The intent stages (keyword, decision cache, semantic, LLM, session), their route data and their one confidence scale."""
