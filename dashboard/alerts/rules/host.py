"""Host rules."""
