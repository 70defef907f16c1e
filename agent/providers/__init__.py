"""LLM providers: OpenAI-compatible Chat Completions and Anthropic Messages, streaming over httpx."""
