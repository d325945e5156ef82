"""The template of the local Dagster instance's dagster.yaml, shipped as package data: `kerneltraj` copies it
into DAGSTER_HOME (default <state>/dagster_home) when that folder has none."""
