"""Engine rules."""
