"""The vector store family."""
