"""Real local servers speaking the wire protocols Switchboard talks to (LLM APIs, chat platforms), for tests."""
