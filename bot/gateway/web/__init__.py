"""The web side of `bot run`: the Control UI and WebChat (server, logins, pages, templates and static files)."""
