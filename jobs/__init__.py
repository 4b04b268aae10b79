"""Ray Data ingestion: stages as callable classes, the pipeline builder, sinks and the CLI entry."""
