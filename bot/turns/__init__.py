"""A turn: a batch of one session's messages answered by its agent, with the files that came with them fetched
first and the answer streamed as it is written."""
