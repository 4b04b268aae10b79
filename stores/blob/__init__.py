"""The blob store family."""
