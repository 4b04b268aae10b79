"""The graph store family."""
