"""Delivery, the last step: everything the bot says goes through the outbox, once and in order per chat across a
crash, and what a long outage left behind is sorted at start."""
