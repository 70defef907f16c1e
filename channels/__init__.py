"""Channel adapters (Telegram, Discord, Slack, console) behind one interface; text chunking and markup."""
