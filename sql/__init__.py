"""DuckDB DDL and named queries (`-- name: <query>` sections), shipped as package data so an installed
kerneltraj reads them without a checkout; `pipelines.core.warehouse.load_sql` is their one reader."""
