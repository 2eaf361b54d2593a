"""Everything that turns events into something a person or another program reads."""
