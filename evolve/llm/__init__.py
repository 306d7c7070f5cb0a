"""Language-model backends (local transformers, OpenAI-compatible HTTP), response cache, constrained decoding."""
