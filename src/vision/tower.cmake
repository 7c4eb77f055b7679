# The vision tower and its mergers.
