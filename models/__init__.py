"""Model clients shared by ingestion, search and serving: embedding models, cross-encoder re-rankers
(``models.rerank``), and later LLM clients.

This package sits beside ``stores``: it imports only ``schemas``, so both ``jobs`` (which embeds
chunks) and ``search`` (which embeds queries) can use the same model code. See docs/adr/0003.
"""
