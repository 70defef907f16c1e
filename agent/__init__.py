"""The agent: LLM providers, the inner loop, the outer runner, transcripts, lanes and prompts."""
