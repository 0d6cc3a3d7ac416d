"""Explore: any stored series, any range, several engines (or boxes) on one chart, with change-log
entries and alerts drawn on it; the page's query string is the view, so its address reproduces it."""
