"""Intake, the first step of a message: journaled (duplicates dropped), checked for access (pairing, allowlists,
mentions), and answered here when it is a chat command; everything else goes on to the lanes as a turn."""
