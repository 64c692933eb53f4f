"""The offline demo model: `provider` (a LiteLLM custom provider; it imports LiteLLM, so load it lazily), what it
answers for each stage (`stages`) and its long-term memory (`memories`)."""
