"""Only the stop hook's old module path (see stopped.py); the controls live in sparkops/controls/."""
