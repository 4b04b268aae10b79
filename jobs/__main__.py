"""``python -m jobs ingest …``: the entrypoint for ``ray job submit``."""

from jobs.cli import app

if __name__ == "__main__":
    app()
