"""The text store family."""
