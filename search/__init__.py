"""Hybrid retrieval: vector, full-text and graph legs, fusion, re-ranking, citations, filters."""
