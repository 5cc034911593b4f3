"""Catch-up: "what did I miss?" as a short, cited digest for one member of one channel.

- ``since``: the time a member typed ("yesterday", "Monday", "3d") resolved against the asking time;
- ``members``: which messages name, address or reply to a member (roster names, @mentions, reply links);
- ``tasks``: who took on what, read from the messages deterministically;
- ``digest``: what goes in a digest (GROUP records with their update chains, else the messages that state
  decisions, plans and norms; mentions; unanswered questions) and the cut to a few lines;
- ``render``: the digest as text with numbered citations;
- ``subscriptions``: who gets a scheduled digest and which digests were sent (restart and duplicate safety).
"""
