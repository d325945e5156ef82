"""kerneltraj pipelines: Dagster definitions, resources, the warehouse, the CLI, importers and publishing."""
