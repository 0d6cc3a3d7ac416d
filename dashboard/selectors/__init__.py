"""Read-only queries the pages and alert rules share."""
