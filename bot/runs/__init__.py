"""What one agent run is: who it acts for (the principal, decided here for every path), and what it needs (model,
tools, prompt), and the stored conversation it runs in."""
