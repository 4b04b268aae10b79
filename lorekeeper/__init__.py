"""Lorekeeper: AI-narrated tabletop play at scale. This package holds the command line and its set-up."""

__version__ = "0.1.0"
