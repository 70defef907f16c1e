"""What the bot tells its operators: Prometheus metrics, log lines (text or JSON, with the turn's context) and the
filter that keeps secrets out of them; every part of the message path may report here."""
